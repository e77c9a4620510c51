// Package sink materializes SpecStar records (metas, revisions, blobs) into
// SpecStar storage deployments, idempotently and independent of arrival
// order, byte-identical to what SpecStar's own stores write.
//
// This root package is the one entry point: Parse reads a sink URL (or
// ParseLayers a deployment) into a Spec, and Spec.Open opens it as a
// Sink. The backends live in sink/disk, sink/postgres and sink/s3, the
// deployment sink routing each layer to its own store in sink/layered.
package sink

import (
	"context"
	"errors"
	"io"
	"iter"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Sink is what the replicator needs of a sink: apply each kind of record,
// make what was applied durable, and release it.
type Sink interface {
	ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (Outcome, error)
	ApplyRevision(ctx context.Context, model string, res *events.RawResource) (Outcome, error)
	ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (Outcome, error)
	ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (Outcome, error)
	Flush(ctx context.Context) error
	Close() error
}

// Overlapper is a Sink that can make one batch durable while the next is
// applied, so that the replicator's Apply calls and the sink's writes
// overlap. Seal ends a batch: FlushSealed writes, in order, what was
// applied before the Seal calls since the last successful FlushSealed (or
// Flush), and nothing applied after the last Seal; one Flush or
// FlushSealed runs at a time, and a Flush still writes everything.
// OverlapsFlush reports whether this sink, as configured, can do so (when
// false, Seal and FlushSealed must not be used).
type Overlapper interface {
	Sink
	OverlapsFlush() bool
	Seal()
	FlushSealed(ctx context.Context) error
}

// Refusal is a revision a Refuser refused while making its batch durable.
type Refusal = store.Refusal

// Refuser is a Sink that can refuse a record only when it flushes (it
// reads the stored rows there, not at Apply) and still writes the rest:
// TakeRefusals returns, once, what the Flush or FlushSealed calls since
// the last call refused, for the caller to dead-letter.
type Refuser interface {
	TakeRefusals() []Refusal
}

// Reader is a Sink that can be read back, so verify and reconcile can
// compare it with a source point-wise.
type Reader interface {
	Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error)
	Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error)
	OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error)
}

// Lister is a Sink that lists what it holds, in byte order, so reconcile
// --prune can find resources only the sink holds.
type Lister interface {
	Models(ctx context.Context) ([]string, error)
	ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error]
}

// RevisionRef names one revision a sink holds (Model "" where its store
// is shared by all models).
type RevisionRef = store.RevisionRef

// RevisionLister is a Sink that lists every revision it holds, of every
// model, so that a forced restore can find those no event up to its point
// wrote.
type RevisionLister interface {
	AllRevisions(ctx context.Context) iter.Seq2[RevisionRef, error]
}

// BlobLister is a Sink that lists the file ids of the blobs it holds.
type BlobLister interface {
	BlobIDs(ctx context.Context) iter.Seq2[string, error]
}

// Exclusive is a Sink that a restore can hold alone: Exclusive fails
// while another writer has it open, and makes every later writer's Open
// fail until this one is closed (Postgres: writers share it otherwise; a
// disk tree is held alone from Open on). An error wrapping
// errors.ErrUnsupported says part of the sink cannot be held.
type Exclusive interface {
	Exclusive(ctx context.Context) error
}

// IsHeld says err is a refusal because another process holds the sink
// (a restore's lease, or a restore lost its own): no retry helps while it
// holds it, so a worker stops with the error rather than retries.
func IsHeld(err error) bool {
	var h interface{ Held() bool }
	return errors.As(err, &h) && h.Held()
}

// Outcome tells the caller what an Apply call did, so that replays and
// out-of-order deliveries can be counted and acknowledged as no-ops.
type Outcome = store.Outcome

// The outcomes of an Apply call.
const (
	Written   = store.Written   // something was written
	Unchanged = store.Unchanged // the sink already held exactly this record
	Stale     = store.Stale     // the sink holds a newer version: nothing was written
	Skipped   = store.Skipped   // on_duplicate=skip, or a layer the sink lacks, left it alone
)

// InvalidError is a permanent problem with a record: retrying it can never
// succeed, so the caller sends it to the dead-letter queue instead.
type InvalidError = store.InvalidError

// IsInvalid reports whether err (or anything it wraps) is an *InvalidError,
// so a caller can route permanent failures to the dead-letter queue.
func IsInvalid(err error) bool { return store.IsInvalid(err) }

// DroppedError is a Flush that refused a record only when writing it and
// dropped its whole queue: the caller applies and flushes the batch again
// one record at a time to find the refused one.
type DroppedError = store.DroppedError

// IsDropped reports whether err (or anything it wraps) is a
// *DroppedError.
func IsDropped(err error) bool { return store.IsDropped(err) }
