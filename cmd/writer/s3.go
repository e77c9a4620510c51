package main

// A SpecStar Postgres+S3 deployment: metas in Postgres, revisions in an S3
// resource store (--resources s3://...), blobs in an S3 blob store or a
// DiskBlobStore (--blobs s3://...|DIR). And the S3 store alone: `writer
// snapshot --resources s3://...` without --from publishes every revision
// and every blob it holds.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source/publish"
	"github.com/specstar/replicator/stream"
)

// snapshotS3 is `writer snapshot --resources s3://...` without --from:
// every revision of the S3 resource store and every blob of the blob
// store published (no metas: they are in the Postgres that was not given).
func snapshotS3(ctx context.Context, f *pgFlags, asJSON bool, stdout, stderr io.Writer, log *slog.Logger) int {
	store, err := publish.OpenS3(ctx, f.src.layers.Resources, f.src.layers.Blobs)
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
		return exitError
	}
	defer store.Close()
	bus, err := stream.Open(ctx, givenIn(f.fs, f.cfg), log)
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
		return exitError
	}
	defer bus.Close()
	start := time.Now()
	meter := progress.New("snapshot "+store.String(), 0, log)
	st, err := store.Publish(ctx, bus, f.inflight, log, meterHooks(&meter))
	meter.Stop(err)
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %s: %v\n", store, err)
		return exitError
	}
	if asJSON {
		cli.JSON(stdout, map[string]any{"from": store.String(), "seconds": time.Since(start).Seconds(), "models": st.Models,
			"revisions": st.Revisions, "blobs": st.BlobsPublished, "unreferenced_blobs": st.UnreferencedBlobs, "duplicates": st.Duplicates})
		return exitOK
	}
	fmt.Fprintf(stdout, "snapshot of %s in %s: models %v, %d revisions, %d blobs (%d referenced by no revision) published (%d already on the stream)\n",
		store, time.Since(start).Round(time.Millisecond), st.Models, st.Revisions, st.BlobsPublished, st.UnreferencedBlobs, st.Duplicates)
	return exitOK
}
