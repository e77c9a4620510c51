package postgres

import (
	"context"
	"errors"

	"github.com/specstar/replicator/source/internal/stores"
)

// BlobOpener reads a deployment's blob store blob by blob; the Postgres
// source does not read blobs itself, its callers (publisher, export) do.
type BlobOpener = stores.BlobOpener

// Stores name a deployment's resource and blob stores when they are not
// given in its postgres:// URL (they override its resources= and blobs=).
type Stores struct {
	// Resources is the resource store: an s3:// URL.
	Resources string
	// Blobs is the blob store: an s3:// URL or a DiskBlobStore directory.
	Blobs string
}

// Deployment is a SpecStar deployment opened for reading: its metas in
// Postgres, revisions from Postgres or from a resource store, and its blob
// store, if one is known. It exists so that snapshot, tail and export open
// a deployment one way.
type Deployment struct {
	// Source reads the metas and revisions.
	Source *Source
	// DSN is the driver's connection string (no source options).
	DSN string
	// Options are the source's options, stores included.
	Options Options
	// Blobs is the blob store; nil: blobs are not read.
	Blobs   BlobOpener
	closers []func()
}

// OpenDeployment opens the deployment whose metas are at from (a
// postgres:// URL); stores, when given, override the URL's resources= and
// blobs=. With a resource store and no blob store, blobs are read from
// the resource store's blob bucket and prefix (the Postgres+S3 factory's
// layout).
func OpenDeployment(ctx context.Context, from string, st Stores) (*Deployment, error) {
	if from == "" {
		return nil, errors.New("--from postgres://... is required")
	}
	dsn, opts, err := ParseURL(from)
	if err != nil {
		return nil, err
	}
	if st.Resources != "" {
		opts.Resources = st.Resources
	}
	if st.Blobs != "" {
		opts.Blobs = st.Blobs
	}
	d := &Deployment{DSN: dsn}
	if opts.Resources != "" {
		store, err := stores.OpenResourceStore(ctx, opts.Resources)
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, func() { store.Close() })
		opts.Revisions, opts.RevisionsFrom = false, store
		d.Blobs = store
	}
	if opts.Blobs != "" {
		s3b, disk, closeFn, err := stores.OpenBlobStore(ctx, opts.Blobs)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.closers = append(d.closers, closeFn)
		d.Blobs = disk
		if s3b != nil {
			d.Blobs = s3b
		}
	}
	d.Options = opts
	if d.Source, err = Open(ctx, dsn, opts); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Close closes the source and the stores.
func (d *Deployment) Close() {
	if d.Source != nil {
		d.Source.Close()
	}
	for _, c := range d.closers {
		c()
	}
}

// ID names the deployment stably, to key its stored position (see ID).
func (d *Deployment) ID() string { return ID(d.DSN, d.Options) }
