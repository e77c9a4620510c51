package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/publish"
	"github.com/specstar/replicator/stream"
)

// tailFactory is `writer tail --from` an all-S3 factory (s3://...?factory=s3,
// or a deployment naming one): the whole factory, then what changes in its
// meta.db files, polled every interval. done is false for any other
// source, which the Postgres path handles.
func tailFactory(ctx context.Context, f *pgFlags, fs *flag.FlagSet, interval time.Duration, stdout, stderr io.Writer, log *slog.Logger) (code int, done bool) {
	cfg, err := f.src.config(fs)
	if err != nil {
		return 0, false
	}
	spec, err := deployment.SourceSpec(cfg, f.src.from, f.src.layers, source.Spec{})
	if err != nil || !source.S3Factory(spec.From) {
		return 0, false
	}
	src, err := source.Open(spec)
	if err != nil {
		return tailCmd.Usagef(stderr, "%v", err), true
	}
	follower, ok := src.(publish.Follower)
	if !ok {
		return tailCmd.Errorf(stderr, exitError, "%s cannot be followed", spec.Name), true
	}
	bus, err := stream.Open(ctx, givenIn(fs, f.cfg), log)
	if err != nil {
		return tailCmd.Errorf(stderr, exitError, "%v", err), true
	}
	defer bus.Close()
	var meter *progress.Meter
	pub := publish.NewPublisher(bus, f.inflight, nil, log, meterHooks(&meter))
	meter = progress.New("tail "+spec.Name, 0, log)
	defer meter.Done()
	st, err := pub.Follow(ctx, follower, interval)
	if err != nil && !errors.Is(err, context.Canceled) {
		return tailCmd.Errorf(stderr, exitError, "%s: %v", spec.Name, err), true
	}
	fmt.Fprintf(stdout, "tail of %s (poll) stopped: %d metas, %d revisions, %d blobs, %d purges published\n",
		spec.Name, st.Metas, st.Revisions, st.Blobs, st.Purges)
	return exitOK, true
}
