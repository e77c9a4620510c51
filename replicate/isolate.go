package replicate

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/sink"
)

// isolate writes msgs, a batch whose flush refused a record only when
// writing it and dropped the whole batch (cause, a sink.DroppedError: a
// Redis key of another type, say), again one event at a time, each
// applied and flushed on its own: an event whose own flush is refused
// is dead-lettered, the others are written (again: every write is
// idempotent), so one foreign key neither halts the sink nor is retried
// forever. Events the apply refuses were dead-lettered by applyBatch
// already (the same refusal) and are passed over.
func (w *Worker) isolate(ctx context.Context, msgs []jetstream.Msg, cause error) error {
	w.log.Warn("a flush refused a record; writing the batch one event at a time to dead-letter it",
		"sink", w.opts.Name, "events", len(msgs), "err", cause)
	for _, msg := range msgs {
		if _, _, err := w.applyWithRetry(ctx, msg, nil); err != nil {
			if isPermanent(err) {
				continue // dead-lettered by applyBatch
			}
			return err
		}
		err := w.retry(ctx, "flush", func() error { return w.snk.Flush(ctx) })
		switch {
		case err == nil:
		case sink.IsDropped(err):
			if err := w.deadLetter(ctx, msg, err); err != nil {
				return err
			}
		default:
			return err // transient until ctx ended, or a refusal that kept the queue
		}
	}
	return nil
}
