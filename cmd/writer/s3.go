package main

// A SpecStar Postgres+S3 deployment: metas in Postgres, revisions in an S3
// resource store (--resources s3://...), blobs in an S3 blob store or a
// DiskBlobStore (--blobs s3://...|DIR). And the S3 store alone: `writer
// snapshot --resources s3://...` without --from publishes every revision
// and every blob it holds.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	specdeploy "github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source/publish"
	"github.com/specstar/replicator/stream"
)

// storeFlags name a deployment's resource and blob stores when they are
// not in Postgres.
type storeFlags struct {
	resources string
	blobs     string
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.resources, "resources", "", "the deployment's resource store: s3://bucket[/prefix]?endpoint=&region=&path_style=true "+
		"(revisions are read there, not from Postgres; prefix defaults to {model}/data/; credentials from the AWS chain)")
	fs.StringVar(&s.blobs, "blobs", "", "the deployment's blob store: s3://bucket[/prefix]?endpoint=... (prefix defaults to blobs/) or a DiskBlobStore "+
		"directory (default: blobs= of the postgres URL, else the --resources store's blob_bucket/blob_prefix)")
}

// snapshotS3 is `writer snapshot --resources s3://...` without --from:
// every revision of the S3 resource store and every blob of the blob
// store published (no metas: they are in the Postgres that was not given).
func snapshotS3(ctx context.Context, f *pgFlags, stdout, stderr io.Writer, log *slog.Logger) int {
	store, err := publish.OpenS3(ctx, f.stores.resources, f.stores.blobs)
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
		return exitInvalid
	}
	defer store.Close()
	bus, err := stream.Open(ctx, givenIn(f.fs, f.cfg), log)
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
		return exitInvalid
	}
	defer bus.Close()
	start := time.Now()
	meter := progress.New("snapshot "+store.String(), 0, log)
	st, err := store.Publish(ctx, bus, f.inflight, log, meterHooks(&meter))
	meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %s: %v\n", store, err)
		return exitInvalid
	}
	fmt.Fprintf(stdout, "snapshot of %s in %s: models %v, %d revisions, %d blobs (%d referenced by no revision) published (%d already on the stream)\n",
		store, time.Since(start).Round(time.Millisecond), st.Models, st.Revisions, st.BlobsPublished, st.UnreferencedBlobs, st.Duplicates)
	return exitOK
}

// configFlag is --config: a YAML file of named deployments (and nats
// settings) shared with `replicator`; --from may then name a deployment.
type configFlag struct{ path string }

func (c *configFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&c.path, "config", os.Getenv("SPECSTAR_CONFIG"), "YAML file with named deployments and nats settings (default $SPECSTAR_CONFIG); --from may name a deployment")
}

// resolve loads the file, applies its nats settings to the flags the
// command line left unset, and, if *from names a deployment, replaces it
// by the deployment's meta store and fills the store flags from its
// resource and blob stores.
func (c *configFlag) resolve(fs *flag.FlagSet, from *string, stores *storeFlags) error {
	if c.path == "" {
		return nil
	}
	cfg, err := specdeploy.Load(c.path)
	if err != nil {
		return err
	}
	if err := cfg.ApplyFlags(fs); err != nil {
		return err
	}
	d, ok, err := cfg.Lookup(*from)
	if err != nil || !ok {
		return err
	}
	meta := d.Layer(specdeploy.MetaLayer)
	if specdeploy.Scheme(meta) != "postgres" {
		return fmt.Errorf("deployment %s: only a Postgres meta store can be read live (its meta store is %s)", d, meta)
	}
	*from = meta
	if r := d.Layer(specdeploy.ResourcesLayer); r != "" && r != meta && stores.resources == "" {
		stores.resources = r
	}
	if b := d.Layer(specdeploy.BlobsLayer); b != "" && stores.blobs == "" {
		stores.blobs = strings.TrimPrefix(b, "disk:")
	}
	if d.Layer(specdeploy.ResourcesLayer) == "" && stores.resources == "" {
		return fmt.Errorf("deployment %s has no resource store", d)
	}
	return nil
}
