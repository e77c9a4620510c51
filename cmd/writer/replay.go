package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var a archiveFlags
	a.register(fs)
	var cfg stream.Config
	fs.StringVar(&cfg.URL, "nats", os.Getenv("NATS_URL"), "NATS server URL (default $NATS_URL; empty runs an embedded JetStream server)")
	fs.StringVar(&cfg.Stream, "stream", "SPECSTAR", "JetStream stream name")
	fs.StringVar(&cfg.SubjectPrefix, "subject-prefix", "specstar", "subject prefix of events")
	fs.StringVar(&cfg.DataDir, "data-dir", stream.DefaultDataDir(), "embedded server's data directory")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "stream replicas (clustered servers)")
	fs.DurationVar(&cfg.DuplicateWindow, "duplicate-window", time.Hour, "how long JetStream drops re-published records by message id")
	inflight := fs.Int("max-inflight", 512, "published events awaiting their acknowledgement at most")
	path, ok := parseArgs(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	f, opts, err := openArchive(path, a)
	if err != nil {
		fmt.Fprintf(stderr, "writer replay: %v\n", err)
		return exitInvalid
	}
	defer f.Close()
	bus, err := stream.Open(ctx, givenIn(fs, cfg), log)
	if err != nil {
		fmt.Fprintf(stderr, "writer replay: %v\n", err)
		return exitInvalid
	}
	defer bus.Close()
	start := time.Now()
	meter := progress.New("replay "+path, opts.Size, log)
	pub := bus.NewPublisher(*inflight)
	st, err := archive.Replay(ctx, f, opts, bus.Prefix(), bus.BlobBucket(), pub, func(n int, off int64) { meter.Update(int64(n), off) })
	if err == nil {
		err = pub.Flush(ctx)
	}
	meter.Update(int64(st.Frames), st.Bytes)
	meter.Done()
	for _, w := range st.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w.Error())
	}
	if err != nil {
		fmt.Fprintf(stderr, "writer replay: %s: %v\n", path, err)
		return exitInvalid
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "replayed %s to stream %s in %s: %d frames (%s), %d metas, %d revisions, %d blobs (%d via object store), %d unknown; %d events stored, %d already there (duplicates)\n",
		path, bus.Config().Stream, el.Round(time.Millisecond), st.Frames, progress.Bytes(st.Bytes), st.Metas, st.Revisions, st.Blobs, st.LargeBlobs, st.Unknown,
		pub.Stats.Published-pub.Stats.Duplicates, pub.Stats.Duplicates)
	return exitOK
}

// givenIn marks the stream settings set on fs's command line as given,
// so an existing stream is checked against them and never reset to this
// command's defaults (stream.Config.Given).
func givenIn(fs *flag.FlagSet, cfg stream.Config) stream.Config {
	cfg.Given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(stream.Settings, f.Name) {
			cfg.Given[f.Name] = true
		}
	})
	return cfg
}
