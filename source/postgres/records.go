package postgres

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	s3sink "github.com/specstar/replicator/sink/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// DeploymentSource reads a live SpecStar deployment whose metas are in
// Postgres as a source of truth (what verify and reconcile compare a sink
// with): metas (and revisions, if they are there) in one snapshot,
// revisions from its S3 resource store when it keeps them there, and, for
// every blob a payload references, a BlobRefRecord carrying the reference
// (file_id, size, content type). A blob is checked in the sink by hashing
// it to its file_id, so the deployment's blob store is never read.
type DeploymentSource struct {
	// Name names the deployment in errors.
	Name string
	// Meta is the meta store's postgres:// URL.
	Meta string
	// Resources is the resource store: Meta itself (revisions read from
	// Postgres), another postgres:// URL (revisions not read), an s3://
	// URL, or "" (as Meta's revisions= option says).
	Resources string
	// BlobRefs yields a BlobRefRecord for each blob a payload references
	// (the deployment has a blob store).
	BlobRefs bool
}

var _ base.Source = (*DeploymentSource)(nil)

// maxSeenRefs bounds the memory of blob references already yielded; past
// it a reference may be yielded (and checked) again, which is harmless.
const maxSeenRefs = 100_000

// errStop ends a Snapshot early when the consumer of the records stops.
var errStop = errors.New("stop")

// Records yields the deployment's records from one snapshot of its meta
// store; the connections are open only while iterating.
func (p *DeploymentSource) Records(ctx context.Context) iter.Seq2[base.Record, error] {
	return func(yield func(base.Record, error) bool) {
		if !strings.HasPrefix(p.Meta, "postgres://") && !strings.HasPrefix(p.Meta, "postgresql://") {
			yield(base.Record{}, fmt.Errorf("source %s: only a Postgres meta store can be read live (give an archive for others)", p.Name))
			return
		}
		dsn, opts, err := ParseURL(p.Meta)
		if err != nil {
			yield(base.Record{}, err)
			return
		}
		res := p.Resources
		switch {
		case strings.HasPrefix(res, "postgres://"), strings.HasPrefix(res, "postgresql://"):
			opts.Revisions = res == p.Meta
		case strings.HasPrefix(res, "s3://"):
			o, err := s3sink.ParseURL(res)
			var st *s3sink.Sink
			if err == nil {
				st, err = s3sink.Open(ctx, o)
			}
			if err != nil {
				yield(base.Record{}, fmt.Errorf("source %s: resources: %w", p.Name, err))
				return
			}
			defer st.Close()
			opts.Revisions, opts.RevisionsFrom, opts.Resources = false, st, res
		case res != "":
			yield(base.Record{}, fmt.Errorf("source %s: a disk resource store cannot be read live yet", p.Name))
			return
		}
		src, err := Open(ctx, dsn, opts)
		if err != nil {
			yield(base.Record{}, err)
			return
		}
		defer src.Close()
		// The blobs already referenced in the current model: SpecStar's
		// dump writes a blob in the section of every model that
		// references it, so the memory is per model.
		seen, seenModel := map[string]bool{}, ""
		_, err = src.Snapshot(ctx, Position{}, func(model string, rec events.Record, _ Position) error {
			if model != seenModel {
				clear(seen)
				seenModel = model
			}
			where := "meta"
			rr, isRev := rec.(*events.RevisionRecord)
			if isRev {
				where = "revision"
			}
			if !yield(base.Record{Model: model, Record: rec, Where: "postgres " + where}, nil) {
				return errStop
			}
			if !isRev || !p.BlobRefs {
				return nil
			}
			raw, err := events.DecodeRawResource(events.Msgpack, rr.Data)
			if err != nil {
				return fmt.Errorf("model %q: revision record: %w", model, err)
			}
			found, err := events.PayloadBinaryRefs(raw.RawData)
			if err != nil {
				return nil // not a payload we can read; its blobs are not checked
			}
			for _, ref := range found {
				if seen[ref.FileID] {
					continue
				}
				if len(seen) >= maxSeenRefs {
					clear(seen)
				}
				seen[ref.FileID] = true
				blob := &events.BlobRefRecord{FileID: ref.FileID, Size: ref.Size, ContentType: ref.ContentType}
				if !yield(base.Record{Model: model, Record: blob, Where: "payload of " + raw.Info.RevisionID}, nil) {
					return errStop
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(base.Record{}, err)
		}
	}
}
