package publish

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	s3sink "github.com/specstar/replicator/sink/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/stores"
	"github.com/specstar/replicator/source/s3"
	"github.com/specstar/replicator/stream"
)

// S3Store is an S3 resource store (and its blob store) opened to be
// published whole, without the metas: they are in a Postgres that was not
// given. It has no stored position: a second run publishes again, which
// the stream's de-duplication and the sinks absorb.
type S3Store struct {
	store  *s3sink.Sink
	walker s3.Blobs   // the blob store listed; nil: not listed
	opener BlobOpener // a blob store that cannot be listed: blobs go with their revisions
	closer func()
}

// S3Stats report what S3Store.Publish published.
type S3Stats struct {
	s3.Stats
	// BlobsPublished counts every blob published: listed, or referenced
	// by a revision when the blob store cannot be listed.
	BlobsPublished int
	// Duplicates counts the events the stream already held.
	Duplicates int64
}

// OpenS3 opens the resource store at resources (an s3:// URL) and the
// blob store at blobs (an s3:// URL or a DiskBlobStore directory; "" = the
// resource store's blob bucket and prefix).
func OpenS3(ctx context.Context, resources, blobs string) (*S3Store, error) {
	store, err := stores.OpenResourceStore(ctx, resources)
	if err != nil {
		return nil, err
	}
	s := &S3Store{store: store, walker: store, closer: func() {}}
	if blobs != "" {
		s3b, disk, closeFn, err := stores.OpenBlobStore(ctx, blobs)
		if err != nil {
			store.Close()
			return nil, err
		}
		s.closer = closeFn
		if s3b != nil {
			s.walker = s3b
		} else {
			// A DiskBlobStore cannot be listed here: the blobs each
			// revision references are published with it instead.
			s.walker, s.opener = nil, disk
		}
	}
	return s, nil
}

// String names the resource store, for messages.
func (s *S3Store) String() string { return s.store.String() }

// Close closes the stores.
func (s *S3Store) Close() {
	s.closer()
	s.store.Close()
}

// Publish publishes every revision of the resource store and every blob
// of the blob store onto bus (at most inflight events awaiting their
// acknowledgement), and waits until all are acknowledged.
func (s *S3Store) Publish(ctx context.Context, bus *stream.Bus, inflight int, log *slog.Logger, hooks Hooks) (S3Stats, error) {
	p := NewPublisher(bus, inflight, s.opener, log, hooks)
	st, err := s3.Snapshot(ctx, s.store, s.walker, nil, s3.Handler{
		Record: func(model string, rec events.Record) error { return p.Publish(ctx, model, rec) },
		Blob: func(ctx context.Context, model string, b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error {
			r, err := open(ctx)
			if err != nil {
				return fmt.Errorf("blob %s: %w", b.FileID.Value, err)
			}
			defer r.Close()
			if err := p.PublishBlob(ctx, model, b.FileID.Value, b, r); err != nil {
				return fmt.Errorf("blob %s: %w", b.FileID.Value, err)
			}
			return nil
		},
	})
	if err == nil {
		err = p.Flush(ctx)
	}
	return S3Stats{Stats: st, BlobsPublished: st.Blobs + p.BlobsSent(), Duplicates: p.Duplicates()}, err
}
