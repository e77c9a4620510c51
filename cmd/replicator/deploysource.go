package main

import (
	"context"
	"iter"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
)

// openSource returns verify and reconcile's source of truth: the archive
// at path, or, when live is not nil, that deployment read live (see
// source.Open). A source that cannot be opened fails when read, as one
// that cannot be reached does.
func openSource(path string, opts acbak.Options, meter *progress.Meter, live *deployment.Deployment) source.Source {
	spec := source.Spec{From: path, Archive: opts, Progress: func(frames int, off int64) { meter.Update(int64(frames), off) }}
	if live != nil {
		spec = source.Spec{Name: live.String(), From: live.Layer(deployment.MetaLayer),
			Resources: live.Layer(deployment.ResourcesLayer), Blobs: live.Layer(deployment.BlobsLayer)}
	}
	src, err := source.Open(spec)
	if err != nil {
		return failedSource{err}
	}
	if live != nil {
		// A live source reports no progress of its own: count what it yields.
		return meteredSource{src, meter}
	}
	return src
}

// meteredSource reports the records a source yields, and their bytes, to
// a meter, so the final progress line of verify and reconcile gives the
// true counts.
type meteredSource struct {
	src   source.Source
	meter *progress.Meter
}

// Records yields src's records, counting each one.
func (m meteredSource) Records(ctx context.Context) iter.Seq2[source.Record, error] {
	return func(yield func(source.Record, error) bool) {
		var n, bytes int64
		for r, err := range m.src.Records(ctx) {
			if err == nil {
				n++
				bytes += recordBytes(r)
				m.meter.Update(n, bytes)
			}
			if !yield(r, err) {
				return
			}
		}
	}
}

// recordBytes is the size of a record's data: its payload where the source
// has it, else what the record carries.
func recordBytes(r source.Record) int64 {
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

// failedSource is a source that could not be opened: reading it yields
// the error.
type failedSource struct{ err error }

func (f failedSource) Records(context.Context) iter.Seq2[source.Record, error] {
	return func(yield func(source.Record, error) bool) { yield(source.Record{}, f.err) }
}
