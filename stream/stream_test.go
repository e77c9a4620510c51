package stream

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
)

// TestEmbeddedServerIsShared: two processes' worth of Opens on one data
// directory share one embedded server, so what one publishes the other
// sees; and the stream outlives the server that served it.
func TestEmbeddedServerIsShared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	first, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	if first.emb == nil || second.emb != nil || first.URL() != second.URL() {
		t.Fatalf("want the second Open to join the first's server: %s vs %s", first.URL(), second.URL())
	}
	pub := second.NewPublisher(4)
	env, err := events.EnvelopeFor(second.Prefix(), "issue", &events.BlobRecord{FileID: "x", BlobData: []byte("x"), Size: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, env); err != nil { // same id: stored once
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if pub.Stats.Published != 2 || pub.Stats.Duplicates != 1 {
		t.Fatalf("stats %+v, want 2 published of which 1 duplicate", pub.Stats)
	}
	second.Close()
	first.Close()

	// A new server on the same directory serves the stored stream.
	third, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	info, err := third.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages after a restart, want 1", info.State.Msgs)
	}
}
