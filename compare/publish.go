package compare

import (
	"context"
	"fmt"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/stream"
)

// BusPublisher is the Publisher that puts repairs onto the event stream,
// for the replicator's consumers to apply.
type BusPublisher struct {
	bus *stream.Bus
	pub *stream.Publisher
	// suffix makes this run's message ids new: the records reconcile sends
	// were usually published before, and within the duplicate window
	// JetStream would drop them as duplicates (a purge does not forget
	// message ids). The sinks are idempotent, so a record delivered twice
	// is harmless.
	suffix string
}

// NewBusPublisher publishes onto bus with up to maxInflight records
// awaiting their acknowledgement; suffix is appended to every message id
// and should be new for each run (e.g. "-reconcile-" and the time).
func NewBusPublisher(bus *stream.Bus, maxInflight int, suffix string) *BusPublisher {
	return &BusPublisher{bus: bus, pub: bus.NewPublisher(maxInflight), suffix: suffix}
}

// Publish sends one record; a blob too large to travel inline goes
// through the stream's object store.
func (b *BusPublisher) Publish(ctx context.Context, rr source.Record) error {
	rec, payload := rr.Record, rr.Payload
	if blob, ok := rec.(*events.BlobRecord); ok {
		size := len(payload)
		if payload == nil {
			size = len(blob.BlobData) // re-encoded: at least this large
		}
		if !b.pub.FitsInline(size) {
			if err := b.pub.PutBlob(ctx, blob.FileID, blob.BlobData); err != nil {
				return fmt.Errorf("blob %s: object store: %w", blob.FileID, err)
			}
			rec = &events.BlobRefRecord{FileID: blob.FileID, Size: blob.Size, ContentType: blob.ContentType, Bucket: b.bus.BlobBucket()}
			payload = nil
		}
	}
	env, err := events.EnvelopeFor(b.bus.Prefix(), rr.Model, rec, payload)
	if err != nil {
		return fmt.Errorf("model %q: %w", rr.Model, err)
	}
	env.Headers[events.HeaderMsgID] += b.suffix
	if err := b.pub.Publish(ctx, env); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

// Flush waits until JetStream has acknowledged everything published.
func (b *BusPublisher) Flush(ctx context.Context) error { return b.pub.Flush(ctx) }

// Duplicates is how many published records JetStream dropped as already
// stored.
func (b *BusPublisher) Duplicates() int64 { return b.pub.Stats.Duplicates }
