package main

import (
	"context"
	"iter"

	"github.com/specstar/replicator/acbak"
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
	return src
}

// failedSource is a source that could not be opened: reading it yields
// the error.
type failedSource struct{ err error }

func (f failedSource) Records(context.Context) iter.Seq2[source.Record, error] {
	return func(yield func(source.Record, error) bool) { yield(source.Record{}, f.err) }
}
