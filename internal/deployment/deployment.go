// Package deployment describes a SpecStar storage deployment the way
// SpecStar's storage factories compose one: a meta store, a resource store
// and a blob store, each named by a URL. Both ends of the pipeline use it:
// `writer` reads a deployment, `replicator` writes (and verifies) one.
package deployment

import (
	"fmt"
	"strings"

	"github.com/specstar/replicator/internal/scheme"
	"github.com/specstar/replicator/source"
)

// Layer names one of a deployment's three stores, for messages and flags.
type Layer string

// The three layers of a SpecStar deployment.
const (
	MetaLayer      Layer = "meta"
	ResourcesLayer Layer = "resources"
	BlobsLayer     Layer = "blobs"
)

// Deployment is one SpecStar storage deployment: where its metas, its
// revisions and its blobs live. A layer left empty is absent (a
// deployment without a blob store, say).
type Deployment struct {
	// Name is the deployment's name in a configuration file; "" for one
	// given by flags.
	Name string `json:"-"`
	// URL serves every layer from one store (disk:/path, an all-S3
	// factory s3://bucket/prefix?factory=s3, or a postgres:// URL for
	// metas and revisions); Meta, Resources and Blobs override it layer by
	// layer.
	URL       string `json:"url,omitempty"`
	Meta      string `json:"meta,omitempty"`
	Resources string `json:"resources,omitempty"`
	Blobs     string `json:"blobs,omitempty"`
}

// Scheme is the kind of store a URL names: "disk", "postgres", "s3",
// "redis", or "s3 factory" for SpecStar's all-S3 factory
// (s3://...?factory=s3).
func Scheme(raw string) string {
	switch {
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return "postgres"
	case source.S3Factory(raw):
		return S3Factory
	case strings.HasPrefix(raw, "s3://"):
		return "s3"
	case strings.HasPrefix(raw, "redis://"), strings.HasPrefix(raw, "rediss://"):
		return "redis"
	case strings.HasPrefix(raw, "disk:"):
		return "disk"
	}
	if s, ok := scheme.Of(raw); ok {
		return s // not a store (dsk:/x): Resolved refuses it
	}
	return "disk"
}

// S3Factory is the Scheme of SpecStar's all-S3 factory, whose one URL
// holds every layer (a meta.db per model beside the S3 stores).
const S3Factory = "s3 factory"

// layersOf says which layers each kind of store can hold, as SpecStar's
// factories use them: there is no Postgres blob store, S3 holds metas
// only as the all-S3 factory's meta.db files, and Redis holds metas only.
var layersOf = map[string][]Layer{
	"disk":     {MetaLayer, ResourcesLayer, BlobsLayer},
	"postgres": {MetaLayer, ResourcesLayer},
	"s3":       {ResourcesLayer, BlobsLayer},
	S3Factory:  {MetaLayer, ResourcesLayer, BlobsLayer},
	"redis":    {MetaLayer},
}

// Resolved returns the deployment with URL spread over the layers it can
// serve, and checks that every layer's store can hold that layer.
func (d Deployment) Resolved() (Deployment, error) {
	out := d
	if d.URL != "" {
		kinds, ok := layersOf[Scheme(d.URL)]
		if !ok {
			return out, fmt.Errorf("deployment %s: url %q: unknown store (known schemes: disk:, postgres://, s3://, redis://; a path with a colon is written ./PATH)", d.label(), d.URL)
		}
		for _, l := range kinds {
			if p := out.layer(l); *p == "" {
				*p = d.URL
			}
		}
		out.URL = ""
	}
	if out.Meta == "" && out.Resources == "" && out.Blobs == "" {
		return out, fmt.Errorf("deployment %s: no store given (set url, or meta, resources and blobs)", d.label())
	}
	for _, l := range []Layer{MetaLayer, ResourcesLayer, BlobsLayer} {
		raw := *out.layer(l)
		if raw == "" {
			continue
		}
		kinds, ok := layersOf[Scheme(raw)]
		if !ok {
			return out, fmt.Errorf("deployment %s: %s %q: unknown store (known schemes: disk:, postgres://, s3://, redis://; a path with a colon is written ./PATH)", d.label(), l, raw)
		}
		if !contains(kinds, l) {
			return out, fmt.Errorf("deployment %s: %s %q: a %s store cannot hold %s (SpecStar has %s)", d.label(), l, raw, Scheme(raw), l, kindsFor(l))
		}
	}
	return out, nil
}

// Layer returns the URL of one layer ("" if absent).
func (d Deployment) Layer(l Layer) string { return *d.layer(l) }

func (d *Deployment) layer(l Layer) *string {
	switch l {
	case MetaLayer:
		return &d.Meta
	case ResourcesLayer:
		return &d.Resources
	}
	return &d.Blobs
}

// Single reports the one URL that serves every present layer, if there is
// one: such a deployment is a plain sink or source of its own kind.
func (d Deployment) Single() (string, bool) {
	var one string
	for _, l := range []Layer{MetaLayer, ResourcesLayer, BlobsLayer} {
		u := d.Layer(l)
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

// String describes the deployment for logs, passwords hidden.
func (d Deployment) String() string {
	if u, ok := d.Single(); ok {
		return source.Redact(u)
	}
	var parts []string
	for _, l := range []Layer{MetaLayer, ResourcesLayer, BlobsLayer} {
		if u := d.Layer(l); u != "" {
			parts = append(parts, string(l)+"="+source.Redact(u))
		}
	}
	s := strings.Join(parts, " ")
	if d.Name != "" {
		s = d.Name + " (" + s + ")"
	}
	return s
}

func (d Deployment) label() string {
	if d.Name != "" {
		return fmt.Sprintf("%q", d.Name)
	}
	return "(flags)"
}

func kindsFor(l Layer) string {
	var out []string
	for _, k := range []string{"disk", "postgres", "s3", S3Factory, "redis"} {
		if contains(layersOf[k], l) {
			out = append(out, k)
		}
	}
	return strings.Join(out, ", ") + " " + string(l) + " stores"
}

func contains(ls []Layer, l Layer) bool {
	for _, x := range ls {
		if x == l {
			return true
		}
	}
	return false
}
