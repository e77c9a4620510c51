package replicate_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

// Example embeds the engine: an archive is replayed onto an embedded
// JetStream stream, and one worker materializes it into a SpecStar disk
// tree, then stops once it has applied everything the stream held.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	bus, err := stream.Open(ctx, stream.Config{DataDir: filepath.Join(dir, "nats")}, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	defer bus.Close()
	f, _ := os.Open("../testdata/sample.acbak") // written by SpecStar: 6 metas, 10 revisions
	pub := bus.NewPublisher(64)
	if _, err := archive.Replay(ctx, f, acbak.Options{}, bus.Prefix(), bus.BlobBucket(), pub, nil); err != nil {
		panic(err)
	}
	pub.Flush(ctx)

	snk, _ := sink.Open(ctx, "disk:"+filepath.Join(dir, "mirror"))
	defer snk.Close()
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	w, _ := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: "example"})
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println(w.Stats().Applied, "events applied")
	// Output: 16 events applied
}
