package main

// A SpecStar Postgres+S3 deployment: metas in Postgres, revisions in an S3
// resource store (--resources s3://...), blobs in an S3 blob store or a
// DiskBlobStore (--blobs s3://...|DIR). And the S3 store alone: `writer
// snapshot --resources s3://...` without --from publishes every revision
// and every blob it holds.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/specstar/replicator/events"
	specdeploy "github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source/postgres"
	"github.com/specstar/replicator/source/s3"
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

func isS3URL(s string) bool { return strings.HasPrefix(s, "s3://") }

// openResourceStore opens an s3:// resource store for reading.
func openResourceStore(ctx context.Context, raw string) (*sink.S3, error) {
	if !isS3URL(raw) {
		return nil, fmt.Errorf("resource store %q: want an s3:// URL", raw)
	}
	opts, err := sink.ParseS3URL(raw)
	if err != nil {
		return nil, err
	}
	return sink.OpenS3(ctx, opts)
}

// s3BlobStore is a blob store that can be read blob by blob and listed
// (sink.S3).
type s3BlobStore interface {
	blobOpener
	s3.Blobs
}

// openBlobStore opens a blob store given as an s3:// URL or a
// DiskBlobStore directory; closeFn releases it.
func openBlobStore(ctx context.Context, spec string) (blobs s3BlobStore, disk blobOpener, closeFn func(), err error) {
	if !isS3URL(spec) {
		bs, err := sink.OpenDiskBlobStore(spec)
		if err != nil {
			return nil, nil, nil, err
		}
		return nil, bs, func() {}, nil
	}
	opts, err := sink.ParseS3BlobURL(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := sink.OpenS3(ctx, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return s, nil, func() { s.Close() }, nil
}

// liveDeployment is a SpecStar deployment opened for reading: its metas in
// Postgres, revisions from Postgres or from a resource store, and the
// blob store, if one is known.
type liveDeployment struct {
	src     *postgres.Source
	dsn     string
	opts    postgres.Options
	blobs   blobOpener // nil: blobs are not read
	closers []func()
}

// openDeployment opens the deployment whose metas are at from (a
// postgres:// URL); stores, when given, override the URL's resources= and
// blobs=. With a resource store and no blob store, blobs are read from
// the resource store's blob bucket and prefix (the Postgres+S3 factory's
// layout).
func openDeployment(ctx context.Context, from string, stores storeFlags) (*liveDeployment, error) {
	if from == "" {
		return nil, errors.New("--from postgres://... is required")
	}
	dsn, opts, err := postgres.ParseURL(from)
	if err != nil {
		return nil, err
	}
	if stores.resources != "" {
		opts.Resources = stores.resources
	}
	if stores.blobs != "" {
		opts.Blobs = stores.blobs
	}
	d := &liveDeployment{dsn: dsn}
	if opts.Resources != "" {
		store, err := openResourceStore(ctx, opts.Resources)
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, func() { store.Close() })
		opts.Revisions, opts.RevisionsFrom = false, store
		d.blobs = store
	}
	if opts.Blobs != "" {
		s3b, disk, closeFn, err := openBlobStore(ctx, opts.Blobs)
		if err != nil {
			d.close()
			return nil, err
		}
		d.closers = append(d.closers, closeFn)
		d.blobs = disk
		if s3b != nil {
			d.blobs = s3b
		}
	}
	d.opts = opts
	if d.src, err = postgres.Open(ctx, dsn, opts); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *liveDeployment) close() {
	if d.src != nil {
		d.src.Close()
	}
	for _, c := range d.closers {
		c()
	}
}

// snapshotS3 is `writer snapshot --resources s3://...` without --from:
// every revision of the S3 resource store and every blob of the blob
// store published (no metas: they are in the Postgres that was not given).
// It has no stored position: a second run publishes again, which the
// stream's de-duplication and the sinks absorb.
func snapshotS3(ctx context.Context, f *pgFlags, stdout, stderr io.Writer, log *slog.Logger) int {
	store, err := openResourceStore(ctx, f.stores.resources)
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
		return exitInvalid
	}
	defer store.Close()
	var walker s3.Blobs = store
	var opener blobOpener
	if f.stores.blobs != "" {
		s3b, disk, closeFn, err := openBlobStore(ctx, f.stores.blobs)
		if err != nil {
			fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
			return exitInvalid
		}
		defer closeFn()
		if s3b != nil {
			walker = s3b
		} else {
			// A DiskBlobStore cannot be listed here: the blobs each
			// revision references are published with it instead.
			walker, opener = nil, disk
		}
	}
	bus, err := stream.Open(ctx, f.cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
		return exitInvalid
	}
	p := &pgPublisher{bus: bus, pub: bus.NewPublisher(f.inflight), log: log, sent: map[string]bool{}, blobs: opener}
	defer p.close()
	start := time.Now()
	p.meter = progress.New("snapshot "+store.String(), 0, log)
	st, err := s3.Snapshot(ctx, store, walker, nil, s3.Handler{
		Record: func(model string, rec events.Record) error { return p.publish(ctx, model, rec) },
		Blob: func(ctx context.Context, model string, b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error {
			r, err := open(ctx)
			if err != nil {
				return fmt.Errorf("blob %s: %w", b.FileID.Value, err)
			}
			defer r.Close()
			if err := p.publishBlobData(ctx, model, b.FileID.Value, b, r); err != nil {
				return fmt.Errorf("blob %s: %w", b.FileID.Value, err)
			}
			return nil
		},
	})
	if err == nil {
		err = p.pub.Flush(ctx)
	}
	p.meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %s: %v\n", store, err)
		return exitInvalid
	}
	fmt.Fprintf(stdout, "snapshot of %s in %s: models %v, %d revisions, %d blobs (%d referenced by no revision) published (%d already on the stream)\n",
		store, time.Since(start).Round(time.Millisecond), st.Models, st.Revisions, st.Blobs+len(p.sent), st.UnreferencedBlobs, p.pub.Stats.Duplicates)
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
