// Package stores opens the resource and blob stores of a SpecStar
// deployment for reading (an S3 store, or a DiskBlobStore directory); it
// exists because the Postgres backend, the S3 snapshot and the publisher
// all open them the same way.
package stores

import (
	"context"
	"fmt"
	"io"
	"strings"

	disksink "github.com/specstar/replicator/sink/disk"
	s3sink "github.com/specstar/replicator/sink/s3"

	"github.com/specstar/replicator/events"
)

// BlobOpener reads a deployment's blob store blob by blob
// (disksink.BlobStore or s3sink.Sink).
type BlobOpener interface {
	OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error)
}

// BlobWalker is a blob store that can also be listed (s3sink.Sink).
type BlobWalker interface {
	BlobOpener
	WalkBlobs(ctx context.Context, fn func(b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error) error
}

// IsS3URL says whether a store is given as an s3:// URL.
func IsS3URL(s string) bool { return strings.HasPrefix(s, "s3://") }

// OpenResourceStore opens an s3:// resource store for reading.
func OpenResourceStore(ctx context.Context, raw string) (*s3sink.Sink, error) {
	if !IsS3URL(raw) {
		return nil, fmt.Errorf("resource store %q: want an s3:// URL", raw)
	}
	opts, err := s3sink.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return s3sink.Open(ctx, opts)
}

// OpenBlobStore opens a blob store given as an s3:// URL (s3 is then not
// nil) or a DiskBlobStore directory (disk); closeFn releases it.
func OpenBlobStore(ctx context.Context, spec string) (s3 BlobWalker, disk BlobOpener, closeFn func(), err error) {
	if !IsS3URL(spec) {
		bs, err := disksink.OpenBlobStore(spec)
		if err != nil {
			return nil, nil, nil, err
		}
		return nil, bs, func() {}, nil
	}
	opts, err := s3sink.ParseBlobURL(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := s3sink.Open(ctx, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return s, nil, func() { s.Close() }, nil
}
