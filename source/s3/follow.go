package s3

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zeebo/xxh3"

	s3sink "github.com/specstar/replicator/sink/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// metaMark is what a follower remembers of a meta it yielded: enough to
// tell a changed meta, and whether it is newer, without keeping it.
type metaMark struct {
	hash  xxh3.Uint128
	at    time.Time
	count int64
}

// Follow reads the factory whole (as Records does), then every interval
// compares each model's meta.db ETag with the one it read and, for a
// model whose file changed, yields the metas that are new or newer than
// those it yielded before, each with the revisions it has not yielded
// yet, then the blobs those reference (a referenced blob the factory
// does not hold yet is looked for again at every pass, whatever the
// ETag, and yielded once it is there); a meta that left the file is
// yielded as a PurgeRecord stamped with the time it was found gone.
// After each pass (the first reading included) it calls passDone, so the
// caller can wait for what it published; it returns when ctx ends (with
// ctx's error) or on the first error. Memory: a mark per resource and
// the key of each revision index object yielded.
func (s *Factory) Follow(ctx context.Context, interval time.Duration, yield func(base.Record) error, passDone func() error) error {
	if interval <= 0 {
		return fmt.Errorf("source %s: follow interval %v must be positive", base.Redact(s.URL), interval)
	}
	f, err := OpenFactory(ctx, s.URL)
	if err != nil {
		return fmt.Errorf("source %s: %w", base.Redact(s.URL), err)
	}
	defer f.Close()
	var (
		etags    = map[string]string{}
		marks    = map[string]map[string]metaMark{}
		revs     = map[string]string{}                      // index object key -> ETag yielded
		missing  = map[string]map[string]events.BinaryRef{} // model -> blobs referenced, not held yet
		first    = true
		yieldErr error
	)
	emit := func(r base.Record, err error) bool {
		if err == nil {
			err = yield(r)
		}
		yieldErr = err
		return err == nil
	}
	for {
		models, err := f.Models(ctx)
		if err != nil {
			return fmt.Errorf("source %s: %w", base.Redact(s.URL), err)
		}
		for _, model := range models {
			etag, err := f.Refresh(ctx, model)
			if err != nil {
				return fmt.Errorf("source %s: %w", base.Redact(s.URL), err)
			}
			if missing[model] == nil {
				missing[model] = map[string]events.BinaryRef{}
			}
			if e, ok := etags[model]; ok && e == etag {
				if err := retryBlobs(ctx, f, model, missing[model], emit); err != nil {
					if errors.Is(err, errStop) {
						err = yieldErr
					}
					return fmt.Errorf("source %s: model %q: %w", base.Redact(s.URL), model, err)
				}
				continue
			}
			etags[model] = etag
			if marks[model] == nil {
				marks[model] = map[string]metaMark{}
			}
			if err := followModel(ctx, f, model, marks[model], revs, missing[model], !first, emit); err != nil {
				if errors.Is(err, errStop) {
					err = yieldErr
				}
				return fmt.Errorf("source %s: model %q: %w", base.Redact(s.URL), model, err)
			}
		}
		first = false
		if err := passDone(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// followModel yields what changed in one model since marks were taken,
// and updates them; purges says vanished metas are yielded as purges.
func followModel(ctx context.Context, f *s3sink.Factory, model string, marks map[string]metaMark, revs map[string]string,
	missing map[string]events.BinaryRef, purges bool, emit func(base.Record, error) bool) error {
	r := factoryReader{f: f, model: model, yield: emit, seen: map[string]bool{}, missing: missing,
		skip:     func(lr s3sink.ListedRevision) bool { return revs[lr.Key] == lr.ETag },
		remember: func(lr s3sink.ListedRevision) { revs[lr.Key] = lr.ETag },
	}
	present := map[string]bool{}
	for id, err := range f.ResourceIDs(ctx, model) {
		if err != nil {
			return err
		}
		present[id] = true
		meta, err := f.Meta(ctx, model, id)
		if err != nil {
			return err
		}
		enc, err := meta.Encode(events.Msgpack)
		if err != nil {
			return fmt.Errorf("meta %q: %w", id, err)
		}
		mark := metaMark{hash: xxh3.Hash128(enc), at: meta.UpdatedTime.Instant(), count: meta.TotalRevisionCount}
		if old, ok := marks[id]; ok && (old.hash == mark.hash || !newerMark(mark, old)) {
			continue
		}
		marks[id] = mark
		if err := r.resource(ctx, id); err != nil {
			return err
		}
	}
	for id, ref := range missing { // looked for again with this pass's
		delete(missing, id) // r.blobs puts back what is still not there
		if !r.seen[id] {
			r.seen[id] = true
			r.refs = append(r.refs, ref)
		}
	}
	if err := r.blobs(ctx); err != nil {
		return err
	}
	for id := range marks {
		if present[id] {
			continue
		}
		delete(marks, id)
		if purges {
			rec := &events.PurgeRecord{ResourceID: id, PurgedTime: events.Time{Time: time.Now().UTC()}}
			if !emit(base.Record{Model: model, Record: rec, Where: "s3 factory meta.db (row gone)"}, nil) {
				return errStop
			}
		}
	}
	return nil
}

// newerMark says a meta is newer than the one marked before, by the rule
// of every meta store (updated time, then revision count; a different
// meta tying on both counts as newer, the sinks decide by bytes).
func newerMark(n, o metaMark) bool {
	if c := n.at.Compare(o.at); c != 0 {
		return c > 0
	}
	return n.count >= o.count
}

// retryBlobs looks again for the blobs of a model that were referenced
// but not held at an earlier pass, yields those now there and keeps the
// rest in missing.
func retryBlobs(ctx context.Context, f *s3sink.Factory, model string, missing map[string]events.BinaryRef, emit func(base.Record, error) bool) error {
	if len(missing) == 0 {
		return nil
	}
	r := factoryReader{f: f, model: model, yield: emit, seen: map[string]bool{}, missing: missing}
	for id, ref := range missing {
		r.refs = append(r.refs, ref)
		delete(missing, id)
	}
	return r.blobs(ctx)
}
