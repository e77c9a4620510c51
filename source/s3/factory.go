package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"time"

	s3sink "github.com/specstar/replicator/sink/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// Factory reads SpecStar's all-S3 factory (an s3:// URL with factory=s3)
// as a source of truth, in archive order: per model (in byte order), each
// meta of its meta.db followed by that resource's revisions, then the
// blobs the model's payloads reference (a BlobRefRecord for one the blob
// store lacks). Each model's meta.db is downloaded once per reading, so
// the metas are one snapshot of it.
type Factory struct {
	// URL is the factory's s3:// URL (factory=s3).
	URL string
}

var _ base.Source = (*Factory)(nil)

// IsFactoryURL says whether an s3:// URL names the all-S3 factory rather
// than a resource store, so source.Open picks this reader.
func IsFactoryURL(raw string) bool {
	o, err := s3sink.ParseURL(raw)
	return err == nil && o.Factory
}

// OpenFactory opens the factory a URL names for reading: nothing is
// written, and reads keep the meta.db copy they downloaded first.
func OpenFactory(ctx context.Context, raw string) (*s3sink.Factory, error) {
	o, err := s3sink.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if !o.Factory {
		return nil, fmt.Errorf("source %s: not an all-S3 factory (factory=s3)", base.Redact(raw))
	}
	f, err := s3sink.OpenFactory(ctx, o)
	if err != nil {
		return nil, err
	}
	f.SetRefresh(time.Duration(1<<63 - 1))
	return f, nil
}

// Records yields the factory's records; it is open only while iterating.
func (s *Factory) Records(ctx context.Context) iter.Seq2[base.Record, error] {
	return func(yield func(base.Record, error) bool) {
		f, err := OpenFactory(ctx, s.URL)
		if err != nil {
			yield(base.Record{}, fmt.Errorf("source %s: %w", base.Redact(s.URL), err))
			return
		}
		defer f.Close()
		models, err := f.Models(ctx)
		if err != nil {
			yield(base.Record{}, fmt.Errorf("source %s: %w", base.Redact(s.URL), err))
			return
		}
		for _, model := range models {
			r := factoryReader{f: f, model: model, yield: yield, seen: map[string]bool{}}
			err := r.all(ctx)
			if err == nil {
				err = r.blobs(ctx)
			}
			if err != nil {
				if !errors.Is(err, errStop) {
					yield(base.Record{}, fmt.Errorf("source %s: model %q: %w", base.Redact(s.URL), model, err))
				}
				return
			}
		}
	}
}

// factoryReader yields one model's records.
type factoryReader struct {
	f     *s3sink.Factory
	model string
	yield func(base.Record, error) bool
	refs  []events.BinaryRef // blobs referenced, in first-seen order
	seen  map[string]bool
	// skip, if set, says which revisions (by index object) were yielded
	// already, and remember records those yielded now.
	skip     func(lr s3sink.ListedRevision) bool
	remember func(lr s3sink.ListedRevision)
	// missing, if set (a follower), collects the referenced blobs the
	// factory does not hold yet, to be looked for again at the next pass,
	// instead of yielding them as references: a writer may upload a blob
	// after the meta.db that references it, and no new ETag of the
	// meta.db would tell.
	missing map[string]events.BinaryRef
}

// all yields every meta of the model, each followed by its revisions.
func (r *factoryReader) all(ctx context.Context) error {
	for id, err := range r.f.ResourceIDs(ctx, r.model) {
		if err != nil {
			return err
		}
		if err := r.resource(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// resource yields one resource's meta and its revisions.
func (r *factoryReader) resource(ctx context.Context, id string) error {
	meta, err := r.f.Meta(ctx, r.model, id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // purged since it was listed
	}
	if err != nil {
		return err
	}
	raw, err := meta.Encode(events.Msgpack)
	if err != nil {
		return fmt.Errorf("meta %q: %w", id, err)
	}
	if !r.yield(base.Record{Model: r.model, Record: &events.MetaRecord{Data: raw}, Where: "s3 factory meta " + id}, nil) {
		return errStop
	}
	for lr, err := range r.f.ListRevisions(ctx, r.model, id, r.skip) {
		if err != nil {
			return err
		}
		enc, err := lr.Revision.Encode(events.Msgpack)
		if err != nil {
			return fmt.Errorf("revision %q: %w", lr.RevisionID, err)
		}
		if !r.yield(base.Record{Model: r.model, Record: &events.RevisionRecord{Data: enc}, Where: "s3 factory revision " + lr.Key}, nil) {
			return errStop
		}
		if r.remember != nil {
			r.remember(lr)
		}
		found, err := events.PayloadBinaryRefs(lr.Revision.RawData)
		if err != nil {
			continue // not a payload we can read: its blobs are not found
		}
		for _, ref := range found {
			if !r.seen[ref.FileID] {
				r.seen[ref.FileID] = true
				r.refs = append(r.refs, ref)
			}
		}
	}
	return nil
}

// blobs yields the blobs the model's payloads referenced, with their
// bytes, and forgets them.
func (r *factoryReader) blobs(ctx context.Context) error {
	refs := r.refs
	r.refs = nil
	for _, ref := range refs {
		bin, rc, err := r.f.OpenBlob(ctx, ref.FileID)
		if errors.Is(err, fs.ErrNotExist) && r.missing != nil {
			r.missing[ref.FileID] = ref
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			// Not held: yield the reference, so a reader can tell.
			rec := &events.BlobRefRecord{FileID: ref.FileID, Size: ref.Size, ContentType: ref.ContentType}
			if !r.yield(base.Record{Model: r.model, Record: rec, Where: "s3 factory blob (missing)"}, nil) {
				return errStop
			}
			continue
		}
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("blob %s: %w", ref.FileID, err)
		}
		rec := &events.BlobRecord{FileID: ref.FileID, BlobData: data, Size: int64(len(data)), ContentType: bin.ContentType.Value}
		if !r.yield(base.Record{Model: r.model, Record: rec, Where: "s3 factory blob " + ref.FileID}, nil) {
			return errStop
		}
	}
	return nil
}
