package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/sink"
)

// layerSpecs are the stores of a deployment sink, one per layer (nil:
// the deployment has no such store). Two layers naming the same URL share
// one store.
type layerSpecs struct {
	meta, resources, blobs *sinkSpec
}

// sinkFromDeployment turns a deployment into a sink: a plain sink when one
// URL serves every layer, else a layered sink routing each record to the
// store of its layer.
func sinkFromDeployment(d deployment.Deployment) (*sinkSpec, error) {
	if u, ok := d.Single(); ok && deployment.Scheme(u) != "postgres" {
		s, err := parseSink(u)
		if err != nil {
			return nil, err
		}
		if d.Name != "" {
			s.raw = d.Name + " (" + s.raw + ")"
		}
		return s, nil
	}
	ls := &layerSpecs{}
	byURL := map[string]*sinkSpec{}
	var ids []string
	for _, l := range []deployment.Layer{deployment.MetaLayer, deployment.ResourcesLayer, deployment.BlobsLayer} {
		u := d.Layer(l)
		if u == "" {
			continue
		}
		s := byURL[u]
		if s == nil {
			var err error
			if s, err = parseSink(u); err != nil {
				return nil, fmt.Errorf("deployment %s: %s: %w", d, l, err)
			}
			byURL[u] = s
		}
		switch l {
		case deployment.MetaLayer:
			ls.meta = s
		case deployment.ResourcesLayer:
			ls.resources = s
			if s.kind == "postgres" {
				s.pg.Revisions = true // this store is the deployment's resource store
			}
		case deployment.BlobsLayer:
			ls.blobs = s
			if s.kind == "s3" {
				s.s3.blobStore = true // its path is the blob prefix
			}
		}
		ids = append(ids, string(l)+"="+u)
	}
	if ls.resources == nil && ls.meta != nil && ls.meta.kind == "postgres" {
		ls.meta.pg.Revisions = false
	}
	spec := &sinkSpec{raw: d.String(), kind: "deployment", layers: ls}
	if d.Name != "" {
		spec.name = "sink-" + d.Name
	} else {
		h := xxh3.HashString128("deployment:" + strings.Join(ids, "|")).Bytes()
		spec.name = fmt.Sprintf("sink-dep-%x", h[:6])
	}
	return spec, checkName(spec)
}

// open opens every distinct store of the deployment.
func (ls *layerSpecs) open(ctx context.Context, raw string) (applier, error) {
	out := &layeredSink{raw: raw}
	opened := map[*sinkSpec]applier{}
	get := func(s *sinkSpec) (applier, error) {
		if s == nil {
			return nil, nil
		}
		if a, ok := opened[s]; ok {
			return a, nil
		}
		a, err := s.open(ctx)
		if err != nil {
			return nil, err
		}
		opened[s] = a
		out.all = append(out.all, a)
		return a, nil
	}
	var err error
	// Flush order is the order opened: blobs, then revisions, then metas,
	// so a meta never becomes durable before what it points at.
	if out.blobs, err = get(ls.blobs); err == nil {
		if out.resources, err = get(ls.resources); err == nil {
			out.meta, err = get(ls.meta)
		}
	}
	if err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// layeredSink is a deployment sink whose layers live in different stores
// (for example metas in Postgres, revisions and blobs in S3, or everything
// on disk with blobs in S3). Each record goes to the store of its layer; a
// record of a layer the deployment lacks is Skipped.
type layeredSink struct {
	raw                    string
	meta, resources, blobs applier
	all                    []applier // distinct stores, in flush order
}

func (l *layeredSink) ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (sink.Outcome, error) {
	if l.meta == nil {
		return sink.Skipped, nil
	}
	return l.meta.ApplyMeta(ctx, model, meta)
}

func (l *layeredSink) ApplyRevision(ctx context.Context, model string, res *events.RawResource) (sink.Outcome, error) {
	if l.resources == nil {
		return sink.Skipped, nil
	}
	return l.resources.ApplyRevision(ctx, model, res)
}

func (l *layeredSink) ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (sink.Outcome, error) {
	if l.blobs == nil {
		return sink.Skipped, nil
	}
	return l.blobs.ApplyBlob(ctx, fileID, size, contentType, data)
}

// ApplyPurge removes the meta first; if the meta store holds a newer one
// (a re-creation), the revisions stay too.
func (l *layeredSink) ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (sink.Outcome, error) {
	out := sink.Unchanged
	if l.meta != nil {
		o, err := l.meta.ApplyPurge(ctx, model, resourceID, purgedAt)
		if err != nil || o == sink.Stale {
			return o, err
		}
		out = o
	}
	if l.resources != nil && l.resources != l.meta {
		o, err := l.resources.ApplyPurge(ctx, model, resourceID, purgedAt)
		if err != nil {
			return o, err
		}
		if o == sink.Written {
			out = sink.Written
		}
	}
	return out, nil
}

func (l *layeredSink) Flush(ctx context.Context) error {
	for _, a := range l.all {
		if err := a.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (l *layeredSink) Close() error {
	var errs []error
	for _, a := range l.all {
		errs = append(errs, a.Close())
	}
	return errors.Join(errs...)
}

// Meta, Revision and OpenBlob read back through the store of each layer,
// for verify and reconcile.
func (l *layeredSink) Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error) {
	r, err := l.reader(l.meta, deployment.MetaLayer)
	if err != nil {
		return nil, err
	}
	return r.Meta(ctx, model, resourceID)
}

func (l *layeredSink) Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error) {
	r, err := l.reader(l.resources, deployment.ResourcesLayer)
	if err != nil {
		return nil, nil, err
	}
	return r.Revision(ctx, model, resourceID, revisionID, schemaVersion)
}

func (l *layeredSink) OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error) {
	r, err := l.reader(l.blobs, deployment.BlobsLayer)
	if err != nil {
		return nil, nil, err
	}
	return r.OpenBlob(ctx, fileID)
}

func (l *layeredSink) reader(a applier, layer deployment.Layer) (sinkReader, error) {
	if a == nil {
		return nil, fmt.Errorf("sink %s has no %s store: %w", l.raw, layer, fs.ErrNotExist)
	}
	r, ok := a.(sinkReader)
	if !ok {
		return nil, fmt.Errorf("sink %s: its %s store cannot be read back", l.raw, layer)
	}
	return r, nil
}

// sinkArgs are the flags that name sinks: --sink (repeatable, a URL or
// a deployment of the --config file) and a deployment given layer by
// layer with --meta, --resources and --blobs.
type sinkArgs struct {
	sinks multiFlag
	dep   deployment.Flags
}

func (a *sinkArgs) register(fs *flag.FlagSet, usage string) {
	fs.Var(&a.sinks, "sink", usage)
	a.dep.Register(fs, "sink")
}

// resolve loads the --config file, applies its nats settings to fs's
// unset flags, and returns the sinks named.
func (a *sinkArgs) resolve(fs *flag.FlagSet) (*deployment.Config, []*sinkSpec, error) {
	cfg, err := a.dep.Load()
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.ApplyFlags(fs); err != nil {
		return nil, nil, err
	}
	var specs []*sinkSpec
	for _, v := range a.sinks {
		s, err := sinkNamed(cfg, v)
		if err != nil {
			return nil, nil, err
		}
		specs = append(specs, s)
	}
	if a.dep.Layered() {
		d, err := a.dep.FromFlags("")
		if err != nil {
			return nil, nil, err
		}
		s, err := sinkFromDeployment(d)
		if err != nil {
			return nil, nil, err
		}
		specs = append(specs, s)
	}
	return cfg, specs, nil
}

// Models and ResourceIDs list the resources whose metas the deployment's
// meta store holds, for reconcile --prune.
func (l *layeredSink) Models(ctx context.Context) ([]string, error) {
	ls, err := l.lister()
	if err != nil {
		return nil, err
	}
	return ls.Models(ctx)
}

func (l *layeredSink) ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error] {
	ls, err := l.lister()
	if err != nil {
		return func(yield func(string, error) bool) { yield("", err) }
	}
	return ls.ResourceIDs(ctx, model)
}

func (l *layeredSink) lister() (sinkLister, error) {
	ls, ok := l.meta.(sinkLister)
	if !ok {
		return nil, fmt.Errorf("sink %s: its meta store cannot be listed", l.raw)
	}
	return ls, nil
}

// sinkNamed is the sink a --sink value names: a deployment of cfg, or a
// sink URL.
func sinkNamed(cfg *deployment.Config, v string) (*sinkSpec, error) {
	d, ok, err := cfg.Lookup(v)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return sinkFromDeployment(d)
	}
	return parseSink(v)
}
