package replicate

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/stream"
)

// Marker is a sink that keeps, in its own storage, a mark per durable
// consumer that has written to it, so that a sink that lost its contents
// (a wiped directory, a replaced volume) is noticed rather than trusted to
// hold what its consumer's position says it holds.
type Marker interface {
	// Marked reports whether consumer has marked the sink.
	Marked(ctx context.Context, consumer string) (bool, error)
	// Mark records, durably, that consumer writes the sink.
	Mark(ctx context.Context, consumer string) error
}

// checkMark compares the sink's mark with the consumer's position: a
// consumer that has acknowledged events to a sink that holds no mark of it
// is deleted and made again, so that the whole stream is delivered (and
// checkGap then says if the stream no longer holds all of it). The sink is
// marked before anything is applied to it.
func (w *Worker) checkMark(ctx context.Context, m Marker, cons jetstream.Consumer) (jetstream.Consumer, error) {
	marked, err := m.Marked(ctx, w.opts.Name)
	if err != nil || marked {
		return cons, err
	}
	if !w.fresh {
		info, err := w.consumerInfo(ctx, cons)
		if err != nil {
			return nil, err
		}
		if info.AckFloor.Stream > 0 { // events it says the sink holds
			w.log.Warn("the sink holds no mark of its consumer, which has acknowledged events to it: its contents were lost (or it predates marks); delivering the stream again from its start",
				"sink", w.opts.Display, "consumer", w.opts.Name, "acked_up_to", info.AckFloor.Stream)
			if _, err := stream.Call(ctx, w.bus, "consumer "+w.opts.Name+" delete", func(ctx context.Context) (struct{}, error) {
				return struct{}{}, w.bus.Stream.DeleteConsumer(ctx, w.opts.Name)
			}); err != nil {
				return nil, fmt.Errorf("consumer %s: start again for a sink that lost its contents: %w", w.opts.Name, err)
			}
			if cons, err = w.consumer(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := m.Mark(ctx, w.opts.Name); err != nil {
		return nil, fmt.Errorf("sink %s: %w", w.opts.Display, err)
	}
	return cons, nil
}
