// Package redis reads a SpecStar deployment whose metas are in a Redis
// meta store ({prefix}resource_meta:{resource_id} keys), alone or as the
// fast half of a fast/slow deployment (SpecStar writes metas to Redis and
// moves them about every second into a Postgres or SQLite meta store), as
// a source: a snapshot by SCAN (Source.Records), and the live changes
// (Follow: keyspace notifications where the server allows them, and a
// periodic rescan for what a notification missed). Revisions come from
// the deployment's resource store (a disk tree or an S3 store).
package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
	disksink "github.com/specstar/replicator/sink/disk"
	redissink "github.com/specstar/replicator/sink/redis"
	s3sink "github.com/specstar/replicator/sink/s3"
	"github.com/specstar/replicator/source/internal/base"
)

// Source reads a deployment whose metas are in Redis (and, fast/slow, in
// a slow meta store) as a source of truth: per model in byte order, each
// resource's meta (read from Redis first, then from the slow store; the
// newer when both hold one) followed by its revisions, then the blobs its
// payloads reference.
type Source struct {
	// Name names the deployment in errors.
	Name string
	// Meta is the Redis meta store's URL (see sink/redis.ParseSpec); a
	// slow= option in it names the slow store (see ParseURL).
	Meta string
	// Slow is the slow meta store of a fast/slow deployment, overriding
	// Meta's slow=: a postgres:// URL (its {model}_meta tables) or a disk
	// tree whose metas are in SQLite (disk:/path?meta=sqlite). "" for a
	// Redis-only meta store.
	Slow string
	// Resources is the resource store: a disk tree (disk:/path or a path)
	// or an s3:// URL; "" reads metas only.
	Resources string
	// Log gets the keys skipped because they hold no meta (nil:
	// slog.Default(); Follow's FollowOptions.Log overrides it).
	Log *slog.Logger
}

var _ base.Source = (*Source)(nil)

// ParseURL splits a Redis source URL into the Redis store's own URL and
// the slow store its slow= option names ("" without one). slow= takes a
// URL, query-escaped when it has a query of its own.
func ParseURL(raw string) (fast, slow string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("redis source: %w", err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", "", fmt.Errorf("redis source: query: %w", err)
	}
	slow = q.Get("slow")
	q.Del("slow")
	u.RawQuery = q.Encode()
	return u.String(), slow, nil
}

// metaReader is what the source needs of a slow meta store (a Postgres
// or SQLite meta store, opened read-only through the sink package).
type metaReader interface {
	Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error)
	Models(ctx context.Context) ([]string, error)
	ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error]
}

// revisionReader yields one resource's stored revisions.
type revisionReader interface {
	ResourceRevisions(ctx context.Context, model, resourceID string) iter.Seq2[*events.RawResource, error]
}

// blobOpener reads blobs the resource store holds itself (a disk tree).
type blobOpener interface {
	OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error)
}

// Deployment is a Redis (or fast/slow) deployment opened for reading;
// Records and Follow read through it.
type Deployment struct {
	// Fast is the Redis meta store.
	Fast *redissink.Sink
	// Slow is the slow meta store; nil for a Redis-only one.
	Slow      metaReader
	revisions revisionReader // nil: metas only
	blobs     blobOpener     // nil: blobs yielded as references
	closers   []func()
	name      string
	log       *slog.Logger

	mu       sync.Mutex
	reported map[string]string // key -> why, of the bad keys reported
}

// badKeyError is a Redis key that holds no meta (a value of another type
// than a string, or bytes that do not decode): the resource is skipped
// and the key reported, never taken for a purge nor a reason to stop.
type badKeyError struct {
	key string
	err error
}

func (e *badKeyError) Error() string { return e.err.Error() }
func (e *badKeyError) Unwrap() error { return e.err }

// isBadKey reports whether err is a badKeyError.
func isBadKey(err error) bool {
	var bk *badKeyError
	return errors.As(err, &bk)
}

// reportBadKey logs a key that holds no meta, once per key and reason
// (a tail meets it again at every rescan).
func (d *Deployment) reportBadKey(key string, err error) {
	d.mu.Lock()
	why := err.Error()
	seen := d.reported[key] == why
	if !seen {
		if d.reported == nil || len(d.reported) >= maxSeenBlobs {
			d.reported = map[string]string{}
		}
		d.reported[key] = why
	}
	d.mu.Unlock()
	if !seen {
		d.log.Warn("skipped a Redis key that holds no meta", "source", d.name, "key", key, "why", why)
	}
}

// Open opens the stores the Source names, read-only.
func (s *Source) Open(ctx context.Context) (*Deployment, error) {
	fastURL, slowURL, err := ParseURL(s.Meta)
	if err != nil {
		return nil, err
	}
	if s.Slow != "" {
		slowURL = s.Slow
	}
	name := s.Name
	if name == "" {
		name = base.Redact(s.Meta)
	}
	d := &Deployment{name: name, log: s.Log}
	if d.log == nil {
		d.log = slog.Default()
	}
	spec, err := redissink.ParseSpec(fastURL)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", name, err)
	}
	if d.Fast, err = spec.Open(ctx); err != nil {
		return nil, fmt.Errorf("source %s: %w", name, err)
	}
	d.closers = append(d.closers, func() { d.Fast.Close() })
	if slowURL != "" {
		if err := d.openSlow(ctx, slowURL); err != nil {
			d.Close()
			return nil, err
		}
	}
	if s.Resources != "" {
		if err := d.openResources(ctx, s.Resources); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

func (d *Deployment) openSlow(ctx context.Context, raw string) error {
	spec, err := sink.Parse(raw)
	if err != nil {
		return fmt.Errorf("source %s: slow store: %w", d.name, err)
	}
	if spec.Kind != "postgres" && spec.Kind != "disk" {
		return fmt.Errorf("source %s: slow store %s: want a postgres:// meta store or a disk tree with SQLite metas", d.name, spec.Raw)
	}
	snk, err := spec.OpenReader(ctx)
	if err != nil {
		return fmt.Errorf("source %s: slow store: %w", d.name, err)
	}
	d.closers = append(d.closers, func() { snk.Close() })
	mr, ok := snk.(metaReader)
	if !ok {
		return fmt.Errorf("source %s: slow store %s cannot be listed", d.name, spec.Raw)
	}
	d.Slow = mr
	return nil
}

func (d *Deployment) openResources(ctx context.Context, raw string) error {
	if strings.HasPrefix(raw, "s3://") {
		o, err := s3sink.ParseURL(raw)
		var st *s3sink.Sink
		if err == nil {
			st, err = s3sink.Open(ctx, o)
		}
		if err != nil {
			return fmt.Errorf("source %s: resources: %w", d.name, err)
		}
		d.closers = append(d.closers, func() { st.Close() })
		d.revisions = st
		return nil
	}
	if strings.Contains(raw, "://") {
		return fmt.Errorf("source %s: resources %s: want a disk tree or an s3:// resource store", d.name, base.Redact(raw))
	}
	spec, err := disksink.ParseSpec(raw)
	if err != nil {
		return fmt.Errorf("source %s: resources: %w", d.name, err)
	}
	ds, err := spec.OpenReadOnly(ctx)
	if err != nil {
		return fmt.Errorf("source %s: resources: %w", d.name, err)
	}
	d.closers = append(d.closers, func() { ds.Close() })
	d.revisions, d.blobs = diskRevisions{ds}, ds
	return nil
}

// diskRevisions reads a disk tree's revisions resource by resource.
type diskRevisions struct{ d *disksink.Sink }

func (r diskRevisions) ResourceRevisions(ctx context.Context, model, resourceID string) iter.Seq2[*events.RawResource, error] {
	return func(yield func(*events.RawResource, error) bool) {
		keys, err := r.d.Revisions(ctx, model, resourceID)
		if err != nil {
			yield(nil, err)
			return
		}
		for _, k := range keys {
			info, data, err := r.d.Revision(ctx, model, resourceID, k.RevisionID, k.SchemaVersion)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(&events.RawResource{Info: *info, RawData: data}, nil) {
				return
			}
		}
	}
}

// Close closes every store.
func (d *Deployment) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// Meta is the current meta of one resource: read from Redis first, then
// from the slow store; when both hold one (a move in progress, or a
// resource updated again after its move), the newer. A resource in
// neither wraps fs.ErrNotExist. Reading Redis before the slow store is
// what makes a move invisible: SpecStar writes the slow store before it
// deletes the key, so a key found missing is already in the slow store.
func (d *Deployment) Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error) {
	fast, err := d.Fast.Meta(ctx, model, resourceID)
	var bad error // the Redis key holds no meta: reported, the slow store still read
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		if !sink.IsInvalid(err) {
			return nil, err
		}
		key := d.Fast.Key(model, resourceID)
		d.reportBadKey(key, err)
		bad = &badKeyError{key: key, err: err}
		fast, err = nil, bad
	}
	if d.Slow == nil {
		return fast, err
	}
	slow, serr := d.Slow.Meta(ctx, model, resourceID)
	switch {
	case serr != nil && !errors.Is(serr, fs.ErrNotExist):
		return nil, fmt.Errorf("slow store: %w", serr)
	case serr != nil:
		return fast, err
	case fast == nil:
		return slow, nil // also when the Redis key is a bad one
	}
	if Newer(slow, fast) {
		return slow, nil
	}
	return fast, nil
}

// Newer reports whether meta a is newer than b, by the meta stores'
// ordering (updated time, revision count, then msgpack bytes).
func Newer(a, b *events.ResourceMeta) bool {
	ab, _ := a.Encode(events.Msgpack)
	bb, _ := b.Encode(events.Msgpack)
	return redissink.CompareMeta(a, ab, b, bb) > 0
}

// Models lists the models of both meta stores, in byte order.
func (d *Deployment) Models(ctx context.Context) ([]string, error) {
	models, err := d.Fast.Models(ctx)
	if err != nil {
		return nil, err
	}
	if d.Slow != nil {
		more, err := d.Slow.Models(ctx)
		if err != nil {
			return nil, fmt.Errorf("slow store: %w", err)
		}
		models = append(models, more...)
	}
	slices.Sort(models)
	return slices.Compact(models), nil
}

// ResourceIDs lists the resources of model in either meta store, in byte
// order, each once. Redis is listed before the slow store: SpecStar moves
// a meta by writing the slow store and then deleting the key, so a
// resource missing from the Redis listing because it moved is already in
// the slow store when that is listed.
func (d *Deployment) ResourceIDs(ctx context.Context, model string) ([]string, error) {
	var ids []string
	for id, err := range d.Fast.ResourceIDs(ctx, model) {
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if d.Slow != nil {
		for id, err := range d.Slow.ResourceIDs(ctx, model) {
			if err != nil {
				return nil, fmt.Errorf("slow store: %w", err)
			}
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

var errStop = errors.New("stop")

// Records yields the deployment's records; the stores are open only while
// iterating.
func (s *Source) Records(ctx context.Context) iter.Seq2[base.Record, error] {
	return func(yield func(base.Record, error) bool) {
		d, err := s.Open(ctx)
		if err != nil {
			yield(base.Record{}, err)
			return
		}
		defer d.Close()
		models, err := d.Models(ctx)
		if err != nil {
			yield(base.Record{}, fmt.Errorf("source %s: %w", d.name, err))
			return
		}
		for _, model := range models {
			if err := d.readModel(ctx, model, yield); err != nil {
				if !errors.Is(err, errStop) {
					yield(base.Record{}, fmt.Errorf("source %s: model %q: %w", d.name, model, err))
				}
				return
			}
		}
	}
}

// readModel yields one model's metas, each followed by its revisions,
// then the blobs its payloads reference (each once).
func (d *Deployment) readModel(ctx context.Context, model string, yield func(base.Record, error) bool) error {
	ids, err := d.ResourceIDs(ctx, model)
	if err != nil {
		return err
	}
	var refs []events.BinaryRef
	seen := map[string]bool{}
	for _, id := range ids {
		meta, err := d.Meta(ctx, model, id)
		if errors.Is(err, fs.ErrNotExist) {
			continue // purged since the listing
		}
		if isBadKey(err) {
			continue // reported
		}
		if err != nil {
			return err
		}
		rec, err := MetaRecord(meta)
		if err != nil {
			return err
		}
		if !yield(base.Record{Model: model, Record: rec, Where: "redis meta " + id}, nil) {
			return errStop
		}
		found, _, err := d.yieldRevisions(ctx, model, id, "", yield)
		if err != nil {
			return err
		}
		for _, ref := range found {
			if !seen[ref.FileID] {
				seen[ref.FileID] = true
				refs = append(refs, ref)
			}
		}
	}
	for _, ref := range refs {
		if err := d.yieldBlob(ctx, model, ref, yield); err != nil {
			return err
		}
	}
	return nil
}

// MetaRecord is the archive record of a meta (msgpack, as archives and
// the stream carry it).
func MetaRecord(meta *events.ResourceMeta) (*events.MetaRecord, error) {
	raw, err := meta.Encode(events.Msgpack)
	if err != nil {
		return nil, fmt.Errorf("meta %q: %w", meta.ResourceID, err)
	}
	return &events.MetaRecord{Data: raw}, nil
}

// yieldRevisions yields the stored revisions of one resource and returns
// the blobs their payloads reference, and whether revision current was
// among them (true when there is no resource store).
func (d *Deployment) yieldRevisions(ctx context.Context, model, id, current string, yield func(base.Record, error) bool) ([]events.BinaryRef, bool, error) {
	if d.revisions == nil {
		return nil, true, nil
	}
	var refs []events.BinaryRef
	seen := false
	for res, err := range d.revisions.ResourceRevisions(ctx, model, id) {
		if err != nil {
			return nil, false, err
		}
		enc, err := res.Encode(events.Msgpack)
		if err != nil {
			return nil, false, fmt.Errorf("revision %q: %w", res.Info.RevisionID, err)
		}
		if !yield(base.Record{Model: model, Record: &events.RevisionRecord{Data: enc}, Where: "revision " + res.Info.RevisionID}, nil) {
			return nil, false, errStop
		}
		seen = seen || res.Info.RevisionID == current
		if found, err := events.PayloadBinaryRefs(res.RawData); err == nil {
			refs = append(refs, found...)
		}
	}
	return refs, seen, nil
}

// yieldBlob yields a referenced blob: its bytes when the resource store
// holds them (a disk tree), else the reference, for a reader with the
// blob store to fetch.
func (d *Deployment) yieldBlob(ctx context.Context, model string, ref events.BinaryRef, yield func(base.Record, error) bool) error {
	refRec := &events.BlobRefRecord{FileID: ref.FileID, Size: ref.Size, ContentType: ref.ContentType}
	if d.blobs == nil {
		if !yield(base.Record{Model: model, Record: refRec, Where: "blob reference " + ref.FileID}, nil) {
			return errStop
		}
		return nil
	}
	bin, r, err := d.blobs.OpenBlob(ctx, ref.FileID)
	if errors.Is(err, fs.ErrNotExist) {
		if !yield(base.Record{Model: model, Record: refRec, Where: "blob (missing: " + err.Error() + ")"}, nil) {
			return errStop
		}
		return nil
	}
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return fmt.Errorf("blob %s: %w", ref.FileID, err)
	}
	rec := &events.BlobRecord{FileID: ref.FileID, BlobData: data, Size: int64(len(data)), ContentType: bin.ContentType.Value}
	if !yield(base.Record{Model: model, Record: rec, Where: "blob " + ref.FileID}, nil) {
		return errStop
	}
	return nil
}
