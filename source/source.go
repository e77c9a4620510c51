// Package source is how the replication engine reads SpecStar data: one
// interface, Source, that every kind of source implements (an .acbak
// archive, a live deployment whose metas are in Postgres, an S3 resource
// store), the record it yields, and Open, which picks the backend from a
// URL. The backends are source/archive, source/postgres and source/s3;
// their own APIs (Postgres snapshots with positions, logical replication,
// polling; archive replay) are used directly where one backend is meant.
package source

import (
	"context"
	"iter"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// Record is one record a source yields, with its model and where it was
// found (see base.Record).
type Record = base.Record

// Source yields the records of one consistent reading of what a source
// holds; it is what verify and reconcile compare a sink with.
type Source = base.Source

// Redact hides a URL's password, so that sources can be named in logs.
func Redact(raw string) string { return base.Redact(raw) }

// Metered yields src's records and reports, after each, how many it has
// yielded and their bytes, for sources that report no progress of their
// own (a live deployment), so a command's final progress line gives the
// true counts.
func Metered(src Source, progress func(records int, bytes int64)) Source {
	return metered{src, progress}
}

type metered struct {
	src      Source
	progress func(int, int64)
}

func (m metered) Records(ctx context.Context) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		var n int
		var bytes int64
		for r, err := range m.src.Records(ctx) {
			if err == nil {
				n++
				bytes += recordBytes(r)
				m.progress(n, bytes)
			}
			if !yield(r, err) {
				return
			}
		}
	}
}

// recordBytes is the size of a record's data: its payload where the source
// has it, else what the record carries.
func recordBytes(r Record) int64 {
	if r.Payload != nil {
		return int64(len(r.Payload))
	}
	switch rec := r.Record.(type) {
	case *events.MetaRecord:
		return int64(len(rec.Data))
	case *events.RevisionRecord:
		return int64(len(rec.Data))
	case *events.BlobRecord:
		return int64(len(rec.BlobData))
	case *events.BlobRefRecord:
		return rec.Size
	}
	return 0
}
