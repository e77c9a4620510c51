package sink

import (
	"context"
	"fmt"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/sink/layered"
	"github.com/specstar/replicator/sink/postgres"
	"github.com/specstar/replicator/sink/s3"
)

// layers are the stores of a deployment sink, one per layer (nil: the
// deployment has no such store). Two layers naming the same URL share one
// Spec, so one store.
type layers struct {
	meta, resources, blobs *Spec
}

// Layers names the stores of a deployment, one URL per layer ("" for a
// layer it lacks), so a deployment can be opened as one sink.
type Layers struct {
	Name                   string // the deployment's name; "" for one given layer by layer
	Display                string // the deployment for messages, passwords hidden
	Meta, Resources, Blobs string // store URLs
}

// single is the one URL that serves every present layer, if there is one.
func (l Layers) single() (string, bool) {
	var one string
	for _, u := range []string{l.Meta, l.Resources, l.Blobs} {
		if u == "" {
			continue
		}
		if one != "" && u != one {
			return "", false
		}
		one = u
	}
	return one, one != ""
}

// ParseLayers turns a deployment into a sink: a plain sink when one URL
// serves every layer (unless a Postgres one, whose revisions option
// depends on the layers), else a layered sink routing each record to the
// store of its layer.
func ParseLayers(d Layers) (*Spec, error) {
	if u, ok := d.single(); ok && !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		s, err := Parse(u)
		if err != nil {
			return nil, err
		}
		if d.Name != "" {
			s.Raw = d.Name + " (" + s.Raw + ")"
		}
		return s, nil
	}
	ls := &layers{}
	byURL := map[string]*Spec{}
	var ids []string
	for _, l := range []struct {
		name string
		url  string
	}{{"meta", d.Meta}, {"resources", d.Resources}, {"blobs", d.Blobs}} {
		u := l.url
		if u == "" {
			continue
		}
		s := byURL[u]
		if s == nil {
			var err error
			if s, err = Parse(u); err != nil {
				return nil, fmt.Errorf("deployment %s: %s: %w", d.Display, l.name, err)
			}
			byURL[u] = s
		}
		switch l.name {
		case "meta":
			ls.meta = s
		case "resources":
			ls.resources = s
			if p, ok := s.spec.(*postgres.Spec); ok {
				p.Options.Revisions = true // this store is the deployment's resource store
			}
		case "blobs":
			ls.blobs = s
			if b, ok := s.spec.(*s3.Spec); ok {
				b.BlobStore = true // its path is the blob prefix
			}
		}
		ids = append(ids, l.name+"="+u)
	}
	if ls.resources == nil && ls.meta != nil {
		if p, ok := ls.meta.spec.(*postgres.Spec); ok {
			p.Options.Revisions = false
		}
	}
	spec := &Spec{Raw: d.Display, Kind: "deployment", layers: ls}
	if d.Name != "" {
		spec.Name = "sink-" + d.Name
	} else {
		h := xxh3.HashString128("deployment:" + strings.Join(ids, "|")).Bytes()
		spec.Name = fmt.Sprintf("sink-dep-%x", h[:6])
	}
	return spec, spec.checkName()
}

// open opens every distinct store of the deployment, blobs first, then
// revisions, then metas: the layered sink flushes in that order. readOnly
// opens each for reading back only (Spec.OpenReader).
func (ls *layers) open(ctx context.Context, name string, readOnly bool) (Sink, error) {
	opened := map[*Spec]layered.Store{}
	var all []layered.Store
	get := func(s *Spec) (layered.Store, error) {
		if s == nil {
			return nil, nil
		}
		if a, ok := opened[s]; ok {
			return a, nil
		}
		a, err := s.open(ctx, readOnly)
		if err != nil {
			return nil, err
		}
		opened[s] = a
		all = append(all, a)
		return a, nil
	}
	var meta, resources, blobs layered.Store
	var err error
	if blobs, err = get(ls.blobs); err == nil {
		if resources, err = get(ls.resources); err == nil {
			meta, err = get(ls.meta)
		}
	}
	if err != nil {
		for _, a := range all {
			a.Close()
		}
		return nil, err
	}
	return layered.New(name, meta, resources, blobs), nil
}
