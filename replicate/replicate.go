// Package replicate is the replication engine: it materializes the
// SpecStar event stream into sinks. A Worker runs one sink's durable
// JetStream consumer: it fetches events in batches, applies them in
// parallel (one resource's events in stream order), makes the sink
// durable, acks, retries transient failures with backoff, dead-letters
// events the sink can never apply with their reasons, and refuses to skip
// events retention removed before the sink saw them. Status, the
// dead-letter listing and replay, and the Prometheus metrics are the
// operator's view of the same consumers.
package replicate

import (
	"context"
	"io"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
)

// Sink is what the engine needs from a destination store: apply each kind
// of record idempotently, make what was applied durable, release it. Its
// method set is the one every store of package sink has, so any of them
// (or a sink.Sink) can be handed to a Worker.
type Sink interface {
	ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (sink.Outcome, error)
	ApplyRevision(ctx context.Context, model string, res *events.RawResource) (sink.Outcome, error)
	ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (sink.Outcome, error)
	ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (sink.Outcome, error)
	Flush(ctx context.Context) error
	Close() error
}
