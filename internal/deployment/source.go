package deployment

import (
	"fmt"
	"os"

	"github.com/specstar/replicator/source"
)

// SourceSpec turns what a command is told to read into the spec
// source.Open takes: from is an archive path, a disk directory, a store
// URL or the name of a deployment of cfg (may be nil); layers, when set,
// give (or override) the meta, resource and blob stores. A postgres://
// meta store without a resource store serves its own revisions unless
// its URL says revisions=false. base's Archive and Progress are kept.
func SourceSpec(cfg *Config, from string, layers Flags, base source.Spec) (source.Spec, error) {
	spec := base
	if from == "" && layers.Meta == "" && layers.Resources == "" {
		return spec, fmt.Errorf("no source given (--from ARCHIVE|DIR|URL|NAME)")
	}
	d, named, err := cfg.Lookup(from)
	if err != nil {
		return spec, err
	}
	if !named && from != "" && !layers.Layered() {
		if source.Scheme(from) == "file" {
			if st, err := os.Stat(from); err != nil || !st.IsDir() {
				spec.From, spec.Name = from, from // an archive
				return spec, nil
			}
		}
	}
	if !named {
		d = Deployment{URL: from}
		if Scheme(from) == "postgres" {
			d = Deployment{Meta: from, Resources: from}
			if !source.PostgresRevisions(from) {
				d.Resources = ""
			}
		}
	}
	if layers.Meta != "" {
		d.Meta = layers.Meta
	}
	if layers.Resources != "" {
		d.Resources = layers.Resources
	}
	if layers.Blobs != "" {
		d.Blobs = layers.Blobs
	}
	if d, err = d.Resolved(); err != nil {
		return spec, err
	}
	spec.Name = d.String()
	spec.From, spec.Resources, spec.Blobs = d.Meta, d.Resources, d.Blobs
	switch {
	case spec.From == "":
		spec.From = d.Resources // an S3 resource store alone
	case Scheme(spec.From) == "disk" && spec.Blobs == spec.From:
		spec.Blobs = "" // the tree holds its own blobs
	}
	if Scheme(spec.From) == "disk" && spec.Resources == spec.From {
		spec.Resources = ""
	}
	return spec, nil
}
