// Package layered is the sink of a SpecStar deployment whose layers live
// in different stores (for example metas in Postgres, revisions and blobs
// in S3, or everything on disk with blobs in S3): each record goes to the
// store of its layer. It wraps already-open stores and imports no
// backend; the root sink package opens the stores from a deployment.
package layered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Store is what the layered sink needs of the store of one layer: the
// Apply calls, Flush and Close.
type Store interface {
	ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error)
	ApplyRevision(ctx context.Context, model string, res *events.RawResource) (store.Outcome, error)
	ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (store.Outcome, error)
	ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error)
	Flush(ctx context.Context) error
	Close() error
}

// reader is a Store that can be read back, for verify and reconcile.
type reader interface {
	Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error)
	Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error)
	OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error)
}

// lister is a Store whose resources can be listed, for reconcile --prune.
type lister interface {
	Models(ctx context.Context) ([]string, error)
	ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error]
}

// Sink routes each record to the store of its layer; a record of a layer
// the deployment lacks is Skipped.
type Sink struct {
	name                   string
	meta, resources, blobs Store
	all                    []Store // distinct stores, in flush order
}

// New is the layered sink named name (for messages) over the stores of
// each layer; nil means the deployment has no such store, and one store
// may serve several layers. Flush goes through the distinct stores in the
// order blobs, resources, meta, so a meta never becomes durable before
// what it points at; Close closes each once.
func New(name string, meta, resources, blobs Store) *Sink {
	l := &Sink{name: name, meta: meta, resources: resources, blobs: blobs}
	for _, s := range []Store{blobs, resources, meta} {
		if s != nil && !contains(l.all, s) {
			l.all = append(l.all, s)
		}
	}
	return l
}

func contains(all []Store, s Store) bool {
	for _, a := range all {
		if a == s {
			return true
		}
	}
	return false
}

// ApplyMeta writes the meta to the meta store.
func (l *Sink) ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error) {
	if l.meta == nil {
		return store.Skipped, nil
	}
	return l.meta.ApplyMeta(ctx, model, meta)
}

// ApplyRevision writes the revision to the resource store.
func (l *Sink) ApplyRevision(ctx context.Context, model string, res *events.RawResource) (store.Outcome, error) {
	if l.resources == nil {
		return store.Skipped, nil
	}
	return l.resources.ApplyRevision(ctx, model, res)
}

// ApplyBlob writes the blob to the blob store.
func (l *Sink) ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (store.Outcome, error) {
	if l.blobs == nil {
		return store.Skipped, nil
	}
	return l.blobs.ApplyBlob(ctx, fileID, size, contentType, data)
}

// ApplyPurge removes the meta first; if the meta store holds a newer one
// (a re-creation), the revisions stay too. A meta store that only queues
// (Postgres) says Written before it has compared anything, so the stored
// meta is read first when the store can be read: one newer than purgedAt
// makes the purge Stale before anything is queued or removed.
func (l *Sink) ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	out := store.Unchanged
	if r, ok := l.meta.(reader); ok && l.resources != nil && l.resources != l.meta {
		m, err := r.Meta(ctx, model, resourceID)
		switch {
		case err == nil && m.UpdatedTime.Instant().After(purgedAt.Instant()):
			return store.Stale, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return 0, fmt.Errorf("sink %s: purge %q: read the stored meta: %w", l.name, resourceID, err)
		}
	}
	if l.meta != nil {
		o, err := l.meta.ApplyPurge(ctx, model, resourceID, purgedAt)
		if err != nil || o == store.Stale {
			return o, err
		}
		out = o
	}
	if l.resources != nil && l.resources != l.meta {
		o, err := l.resources.ApplyPurge(ctx, model, resourceID, purgedAt)
		if err != nil {
			return o, err
		}
		if o == store.Written {
			out = store.Written
		}
	}
	return out, nil
}

// Flush flushes every distinct store, blobs first and metas last.
func (l *Sink) Flush(ctx context.Context) error {
	for _, a := range l.all {
		if err := a.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// TakeRefusals collects what the stores that refuse records at Flush
// refused (sink.Refuser).
func (l *Sink) TakeRefusals() []store.Refusal {
	var out []store.Refusal
	for _, a := range l.all {
		if r, ok := a.(interface{ TakeRefusals() []store.Refusal }); ok {
			out = append(out, r.TakeRefusals()...)
		}
	}
	return out
}

// Close closes every distinct store.
func (l *Sink) Close() error {
	var errs []error
	for _, a := range l.all {
		errs = append(errs, a.Close())
	}
	return errors.Join(errs...)
}

// Meta reads back through the meta store, for verify and reconcile.
func (l *Sink) Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error) {
	r, err := l.reader(l.meta, "meta")
	if err != nil {
		return nil, err
	}
	return r.Meta(ctx, model, resourceID)
}

// Revision reads back through the resource store, for verify and
// reconcile.
func (l *Sink) Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error) {
	r, err := l.reader(l.resources, "resources")
	if err != nil {
		return nil, nil, err
	}
	return r.Revision(ctx, model, resourceID, revisionID, schemaVersion)
}

// OpenBlob reads back through the blob store, for verify and reconcile.
func (l *Sink) OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error) {
	r, err := l.reader(l.blobs, "blobs")
	if err != nil {
		return nil, nil, err
	}
	return r.OpenBlob(ctx, fileID)
}

func (l *Sink) reader(a Store, layer string) (reader, error) {
	if a == nil {
		return nil, fmt.Errorf("sink %s has no %s store: %w", l.name, layer, fs.ErrNotExist)
	}
	r, ok := a.(reader)
	if !ok {
		return nil, fmt.Errorf("sink %s: its %s store cannot be read back", l.name, layer)
	}
	return r, nil
}

// Models lists the models whose metas the meta store holds, for
// reconcile --prune.
func (l *Sink) Models(ctx context.Context) ([]string, error) {
	ls, err := l.lister()
	if err != nil {
		return nil, err
	}
	return ls.Models(ctx)
}

// ResourceIDs lists the resources of model whose metas the meta store
// holds, for reconcile --prune.
func (l *Sink) ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error] {
	ls, err := l.lister()
	if err != nil {
		return func(yield func(string, error) bool) { yield("", err) }
	}
	return ls.ResourceIDs(ctx, model)
}

func (l *Sink) lister() (lister, error) {
	ls, ok := l.meta.(lister)
	if !ok {
		return nil, fmt.Errorf("sink %s: its meta store cannot be listed", l.name)
	}
	return ls, nil
}

// marker is a Store that keeps a mark per consumer (replicate.Marker).
type marker interface {
	Marked(ctx context.Context, consumer string) (bool, error)
	Mark(ctx context.Context, consumer string) error
}

// Marked reports whether every store that keeps marks holds consumer's,
// so that one layer that lost its contents has the whole stream delivered
// again (the other layers take it as duplicates). With no such store it
// reports true: nothing can tell.
func (l *Sink) Marked(ctx context.Context, consumer string) (bool, error) {
	for _, a := range l.all {
		if m, ok := a.(marker); ok {
			marked, err := m.Marked(ctx, consumer)
			if err != nil || !marked {
				return false, err
			}
		}
	}
	return true, nil
}

// Mark marks every store that keeps marks.
func (l *Sink) Mark(ctx context.Context, consumer string) error {
	for _, a := range l.all {
		if m, ok := a.(marker); ok {
			if err := m.Mark(ctx, consumer); err != nil {
				return err
			}
		}
	}
	return nil
}

// AllRevisions lists the revisions of the resources store (none without
// one; an error wrapping errors.ErrUnsupported when it cannot list them).
func (l *Sink) AllRevisions(ctx context.Context) iter.Seq2[store.RevisionRef, error] {
	type revisionLister interface {
		AllRevisions(ctx context.Context) iter.Seq2[store.RevisionRef, error]
	}
	switch r, ok := l.resources.(revisionLister); {
	case l.resources == nil:
		return func(func(store.RevisionRef, error) bool) {}
	case !ok:
		return func(yield func(store.RevisionRef, error) bool) {
			yield(store.RevisionRef{}, fmt.Errorf("sink %s: its resources store cannot list its revisions: %w", l.name, errors.ErrUnsupported))
		}
	default:
		return r.AllRevisions(ctx)
	}
}

// BlobIDs lists the blobs of the blobs store (none without one; an error
// wrapping errors.ErrUnsupported when it cannot list them).
func (l *Sink) BlobIDs(ctx context.Context) iter.Seq2[string, error] {
	type blobLister interface {
		BlobIDs(ctx context.Context) iter.Seq2[string, error]
	}
	switch b, ok := l.blobs.(blobLister); {
	case l.blobs == nil:
		return func(func(string, error) bool) {}
	case !ok:
		return func(yield func(string, error) bool) {
			yield("", fmt.Errorf("sink %s: its blobs store cannot list its blobs: %w", l.name, errors.ErrUnsupported))
		}
	default:
		return b.BlobIDs(ctx)
	}
}

// Exclusive holds, for the caller alone, every store that can be held
// (see sink.Exclusive); when one cannot, the others are still held and
// the error wraps errors.ErrUnsupported naming it.
func (l *Sink) Exclusive(ctx context.Context) error {
	type exclusive interface {
		Exclusive(ctx context.Context) error
	}
	var unheld error
	for _, a := range l.all {
		e, ok := a.(exclusive)
		if !ok {
			name := fmt.Sprintf("%T", a)
			if s, ok := a.(fmt.Stringer); ok {
				name = s.String()
			}
			unheld = fmt.Errorf("sink %s: its store %s cannot be held alone: %w", l.name, name, errors.ErrUnsupported)
			continue
		}
		if err := e.Exclusive(ctx); err != nil {
			return err
		}
	}
	return unheld
}

// Stores are the distinct stores of the layers, for a caller that checks
// each (`replicator doctor`).
func (l *Sink) Stores() []Store { return append([]Store(nil), l.all...) }
