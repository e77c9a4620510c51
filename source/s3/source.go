package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	s3sink "github.com/specstar/replicator/sink/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// Source reads an S3 resource store, and optionally its blob store, as a
// source of truth: every revision, then a BlobRefRecord per blob (its
// bytes are not read: a sink's copy is checked by hashing it).
type Source struct {
	// Resources is the resource store's s3:// URL.
	Resources string
	// Blobs is the blob store's s3:// URL; "" reads no blobs.
	Blobs string
}

var _ base.Source = (*Source)(nil)

// errStop ends a Snapshot early when the consumer of the records stops.
var errStop = errors.New("stop")

// Records yields the store's revisions and blob references; the stores
// are open only while iterating.
func (s *Source) Records(ctx context.Context) iter.Seq2[base.Record, error] {
	return func(yield func(base.Record, error) bool) {
		revs, closeRevs, err := openStore(ctx, s.Resources, s3sink.ParseURL)
		if err != nil {
			yield(base.Record{}, fmt.Errorf("source %s: resources: %w", base.Redact(s.Resources), err))
			return
		}
		defer closeRevs()
		var blobs Blobs
		if s.Blobs != "" {
			b, closeBlobs, err := openStore(ctx, s.Blobs, s3sink.ParseBlobURL)
			if err != nil {
				yield(base.Record{}, fmt.Errorf("source %s: blobs: %w", base.Redact(s.Blobs), err))
				return
			}
			defer closeBlobs()
			blobs = b
		}
		_, err = Snapshot(ctx, revs, blobs, nil, Handler{
			Record: func(model string, rec events.Record) error {
				if !yield(base.Record{Model: model, Record: rec, Where: "s3 revision"}, nil) {
					return errStop
				}
				return nil
			},
			Blob: func(_ context.Context, model string, b *events.Binary, _ func(context.Context) (io.ReadCloser, error)) error {
				ref := &events.BlobRefRecord{FileID: b.FileID.Value, Size: b.Size.Value, ContentType: b.ContentType.Value}
				if !yield(base.Record{Model: model, Record: ref, Where: "s3 blob store"}, nil) {
					return errStop
				}
				return nil
			},
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(base.Record{}, err)
		}
	}
}

// openStore opens an s3:// store read with parse.
func openStore(ctx context.Context, raw string, parse func(string) (s3sink.Options, error)) (*s3sink.Sink, func(), error) {
	o, err := parse(raw)
	if err != nil {
		return nil, nil, err
	}
	st, err := s3sink.Open(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	return st, func() { st.Close() }, nil
}
