package replicate_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// TestPurgeWaitsForEarlierEvents: two processes share a sink's durable
// consumer. The first holds a resource's meta (fetched, not yet applied);
// the second is handed the purge that follows it on the stream. The purge
// must wait until the meta is applied and acked, or the meta, applied
// after it, would re-create the purged resource; so the sink ends without
// the resource, as one process in stream order leaves it.
func TestPurgeWaitsForEarlierEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()

	meta, _ := firstMetaAndRevision(t)
	data, err := meta.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	purgedAt := events.Time{Time: meta.UpdatedTime.Instant().Add(time.Hour)}
	pub := bus.NewPublisher(4)
	for _, rec := range []events.Record{&events.MetaRecord{Data: data}, &events.PurgeRecord{ResourceID: meta.ResourceID, PurgedTime: purgedAt}} {
		env, err := events.EnvelopeFor(bus.Prefix(), "issue", rec, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	snk, err := sink.Open(ctx, "disk:"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	// The first process: the shared consumer as a worker makes it, and
	// the meta fetched from it and held.
	cons, err := bus.Stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "shared", Description: "SpecStar sink consumer", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: cfg.AckWait, MaxAckPending: cfg.MaxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: bus.Prefix() + ".>",
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var held jetstream.Msg
	for m := range batch.Messages() {
		held = m
	}
	if held == nil || held.Subject() != bus.Prefix()+".issue.meta" {
		t.Fatalf("the first process was handed %v, want the meta", held)
	}

	// The second process: a worker on the same consumer gets the purge.
	w, err := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("the worker finished while an earlier event was still held: %v", err)
	case <-time.After(2 * time.Second):
	}
	if w.Stats().Applied != 0 {
		t.Fatalf("the purge was applied before the meta before it: %+v", w.Stats())
	}

	// The first process applies and acks the meta; then the purge goes.
	if _, err := snk.ApplyMeta(ctx, "issue", meta); err != nil {
		t.Fatal(err)
	}
	if err := snk.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := snk.(sink.Reader).Meta(ctx, "issue", meta.ResourceID); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the purged resource is back: meta read gives %v", err)
	}
}

// TestPurgeOfFilteredSinkDoesNotWait: a sink filtered to one model never
// sees the other models' events, which its consumer's ack floor stays
// below; a purge must not wait for those. One worker drains a stream of
// another model's meta, then a meta and its purge, and the resource ends
// purged.
func TestPurgeOfFilteredSinkDoesNotWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	meta, _ := firstMetaAndRevision(t)
	data, err := meta.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(4)
	for _, e := range []struct {
		model string
		rec   events.Record
	}{
		{"other", &events.MetaRecord{Data: data}},
		{"issue", &events.MetaRecord{Data: data}},
		{"issue", &events.PurgeRecord{ResourceID: meta.ResourceID, PurgedTime: events.Time{Time: meta.UpdatedTime.Instant().Add(time.Hour)}}},
	} {
		env, err := events.EnvelopeFor(bus.Prefix(), e.model, e.rec, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	snk, err := sink.Open(ctx, "disk:"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	w, err := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: "issues", Models: []string{"issue"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the drain took %v: the purge waited", d)
	}
	if _, err := snk.(sink.Reader).Meta(ctx, "issue", meta.ResourceID); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the purged resource is there: meta read gives %v", err)
	}
}
