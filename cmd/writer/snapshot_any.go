package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/export"
	"github.com/specstar/replicator/source/publish"
	"github.com/specstar/replicator/stream"
)

// snapshotAny is `writer snapshot --from` a source that has no live tail
// (an archive, a disk deployment, an all-S3 factory): every record it
// holds, published once.
// done is false for Postgres and S3 sources, which cmdSnapshot handles
// with their stored positions.
func snapshotAny(ctx context.Context, f *pgFlags, fs *flag.FlagSet, asJSON bool, stdout, stderr io.Writer, log *slog.Logger) (code int, done bool) {
	cfg, err := f.src.config(fs)
	if err != nil {
		return snapshotCmd.Usagef(stderr, "%v", err), true
	}
	spec, err := deployment.SourceSpec(cfg, f.src.from, f.src.layers, source.Spec{})
	if err != nil || spec.From == "" {
		return 0, false // let the Postgres path say what is wrong
	}
	switch source.Scheme(spec.From) {
	case "postgres", "postgresql":
		return 0, false
	case "s3":
		if !source.S3Factory(spec.From) {
			return 0, false
		}
	}
	src, err := source.Open(spec)
	if err != nil {
		return snapshotCmd.Usagef(stderr, "%v", err), true
	}
	bus, err := stream.Open(ctx, givenIn(fs, f.cfg), log)
	if err != nil {
		return snapshotCmd.Errorf(stderr, exitError, "%v", err), true
	}
	defer bus.Close()
	start := time.Now()
	var meter *progress.Meter
	var blobs publish.BlobOpener
	if source.Scheme(spec.From) == "redis" && strings.HasPrefix(spec.Blobs, "s3://") {
		// A Redis source over S3 yields blob references: the publisher
		// reads them with the revisions that reference them.
		b, closeBlobs, err := export.OpenBlobs(ctx, spec)
		if err != nil {
			return snapshotCmd.Errorf(stderr, exitError, "%v", err), true
		}
		defer closeBlobs()
		blobs = b
	}
	pub := publish.NewPublisher(bus, f.inflight, blobs, log, meterHooks(&meter))
	meter = progress.New("snapshot "+spec.Name, 0, log)
	st, err := pub.Records(ctx, src)
	meter.Stop(err)
	if err != nil {
		return snapshotCmd.Errorf(stderr, exitError, "%s: %v", spec.Name, err), true
	}
	if asJSON {
		cli.JSON(stdout, map[string]any{"from": spec.Name, "seconds": time.Since(start).Seconds(), "metas": st.Metas,
			"revisions": st.Revisions, "blobs": st.Blobs, "missing_blobs": st.Missing, "duplicates": pub.Duplicates()})
		return exitOK, true
	}
	fmt.Fprintf(stdout, "snapshot of %s in %s: %d metas, %d revisions, %d blobs published (%d already on the stream); %d referenced blobs missing\n",
		spec.Name, time.Since(start).Round(time.Millisecond), st.Metas, st.Revisions, st.Blobs, pub.Duplicates(), st.Missing)
	return exitOK, true
}
