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
	// PerModelRefs yields, at the end of each model's revisions, a
	// BlobRefRecord per blob its payloads reference (a blob shared by two
	// models in both, as SpecStar's dump writes them) instead of listing
	// the blob store; what export reads.
	PerModelRefs bool
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
		if s.PerModelRefs {
			err = perModelRefs(ctx, revs, yield)
			if err != nil && !errors.Is(err, errStop) {
				yield(base.Record{}, err)
			}
			return
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

// perModelRefs yields every revision of revs, model by model, each model
// followed by a BlobRefRecord per blob its payloads reference (each once
// in the model).
func perModelRefs(ctx context.Context, revs Revisions, yield func(base.Record, error) bool) error {
	model := ""
	var refs []events.BinaryRef
	seen := map[string]bool{}
	flush := func() error {
		for _, ref := range refs {
			rec := &events.BlobRefRecord{FileID: ref.FileID, Size: ref.Size, ContentType: ref.ContentType}
			if !yield(base.Record{Model: model, Record: rec, Where: "payload reference"}, nil) {
				return errStop
			}
		}
		refs = nil
		clear(seen)
		return nil
	}
	_, err := Snapshot(ctx, revs, nil, nil, Handler{
		Record: func(m string, rec events.Record) error {
			if m != model {
				if err := flush(); err != nil {
					return err
				}
				model = m
			}
			if !yield(base.Record{Model: m, Record: rec, Where: "s3 revision"}, nil) {
				return errStop
			}
			rr, ok := rec.(*events.RevisionRecord)
			if !ok {
				return nil
			}
			raw, err := events.DecodeRawResource(events.Msgpack, rr.Data)
			if err != nil {
				return fmt.Errorf("model %q: revision record: %w", m, err)
			}
			found, err := events.PayloadBinaryRefs(raw.RawData)
			if err != nil {
				return nil // not a payload we can read: its blobs are not found
			}
			for _, ref := range found {
				if !seen[ref.FileID] {
					seen[ref.FileID] = true
					refs = append(refs, ref)
				}
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	return flush()
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
