package main

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/deployment"
	s3sink "github.com/specstar/replicator/sink/s3"
	"github.com/specstar/replicator/source"
)

// deploymentSource reads a live SpecStar deployment as verify and
// reconcile's source of truth: metas (and revisions, if they are there)
// from its Postgres meta store in one snapshot, revisions from its S3
// resource store when it keeps them there, and, for every blob a payload
// references, a BlobRefRecord carrying the reference (file_id, size,
// content type). A blob is checked in the sink by hashing it to its
// file_id, so the source's blob store is never read.
type deploymentSource struct {
	dep deployment.Deployment
}

// maxSeenRefs bounds the memory of blob references already yielded; past
// it a reference may be yielded (and checked) again, which is harmless.
const maxSeenRefs = 100_000

func (p *deploymentSource) Records(ctx context.Context) iter.Seq2[sourceRecord, error] {
	return func(yield func(sourceRecord, error) bool) {
		metaURL := p.dep.Layer(deployment.MetaLayer)
		if deployment.Scheme(metaURL) != "postgres" {
			yield(sourceRecord{}, fmt.Errorf("source %s: only a Postgres meta store can be read live (give an archive for others)", p.dep))
			return
		}
		dsn, opts, err := source.ParsePostgresURL(metaURL)
		if err != nil {
			yield(sourceRecord{}, err)
			return
		}
		res := p.dep.Layer(deployment.ResourcesLayer)
		switch deployment.Scheme(res) {
		case "postgres":
			opts.Revisions = res == metaURL
		case "s3":
			st, err := openS3Revisions(ctx, res)
			if err != nil {
				yield(sourceRecord{}, fmt.Errorf("source %s: resources: %w", p.dep, err))
				return
			}
			defer st.Close()
			opts.Revisions, opts.RevisionsFrom, opts.Resources = false, st, res
		case "disk":
			yield(sourceRecord{}, fmt.Errorf("source %s: a disk resource store cannot be read live yet", p.dep))
			return
		}
		refs := p.dep.Layer(deployment.BlobsLayer) != ""
		src, err := source.OpenPostgres(ctx, dsn, opts)
		if err != nil {
			yield(sourceRecord{}, err)
			return
		}
		defer src.Close()
		seen := map[string]bool{}
		_, err = src.Snapshot(ctx, source.Position{}, func(model string, rec events.Record, _ source.Position) error {
			where := "meta"
			rr, isRev := rec.(*events.RevisionRecord)
			if isRev {
				where = "revision"
			}
			if !yield(sourceRecord{Model: model, Record: rec, Where: "postgres " + where}, nil) {
				return errStop
			}
			if !isRev || !refs {
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
				if !yield(sourceRecord{Model: model, Record: blob, Where: "payload of " + raw.Info.RevisionID}, nil) {
					return errStop
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(sourceRecord{}, err)
		}
	}
}

// openS3Revisions opens an S3 resource store to read revisions from.
func openS3Revisions(ctx context.Context, raw string) (*s3sink.Sink, error) {
	o, err := s3sink.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return s3sink.Open(ctx, o)
}
