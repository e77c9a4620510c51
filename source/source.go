// Package source is how the replication engine reads SpecStar data: one
// interface, Source, that every kind of source implements (an .acbak
// archive, a live deployment whose metas are in Postgres, an S3 resource
// store), the record it yields, and Open, which picks the backend from a
// URL. The backends are source/archive, source/postgres and source/s3;
// their own APIs (Postgres snapshots with positions, logical replication,
// polling; archive replay) are used directly where one backend is meant.
package source

import "github.com/specstar/replicator/source/internal/base"

// Record is one record a source yields, with its model and where it was
// found (see base.Record).
type Record = base.Record

// Source yields the records of one consistent reading of what a source
// holds; it is what verify and reconcile compare a sink with.
type Source = base.Source

// Redact hides a URL's password, so that sources can be named in logs.
func Redact(raw string) string { return base.Redact(raw) }
