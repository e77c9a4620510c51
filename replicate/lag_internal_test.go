package replicate

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// TestLagIsTheAgeOfTheOldestUnappliedEvent (issue 23, item 4):
// specstar_sink_lag_seconds is how old the first event after the
// consumer's ack floor is, by the stream's timestamp, and 0 once the sink
// has applied everything.
func TestLagIsTheAgeOfTheOldestUnappliedEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatalf("embedded JetStream: %v", err)
	}
	defer bus.Close()
	pub := bus.NewPublisher(4)
	env, err := events.EnvelopeFor(bus.Prefix(), "lag", &events.ModelStartRecord{ModelName: "lag"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	published := time.Now()
	snk, err := sink.Open(ctx, "disk:"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	cfg := DefaultConfig()
	cfg.UntilDrained = true
	w, err := NewWorker(bus, snk, Options{Config: cfg, Name: "lagging", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := w.consumer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the event is over half a second old, then the lag is at
	// least that.
	for time.Since(published) < 500*time.Millisecond {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Since(published)
	lag, ok := w.lag(ctx, info)
	if !ok || lag < 500*time.Millisecond || lag > before+time.Second {
		t.Fatalf("lag of an unapplied event published %v ago = %v (ok %v)", before, lag, ok)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err = cons.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if lag, ok := w.lag(ctx, info); !ok || lag != 0 {
		t.Fatalf("lag once everything is applied = %v (ok %v), want 0", lag, ok)
	}
}
