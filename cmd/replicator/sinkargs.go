package main

import (
	"flag"

	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/sink"
)

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
func (a *sinkArgs) resolve(fs *flag.FlagSet) (*deployment.Config, []*sink.Spec, error) {
	cfg, err := a.dep.Load()
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.ApplyFlags(fs); err != nil {
		return nil, nil, err
	}
	var specs []*sink.Spec
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

// sinkNamed is the sink a --sink value names: a deployment of cfg, or a
// sink URL.
func sinkNamed(cfg *deployment.Config, v string) (*sink.Spec, error) {
	d, ok, err := cfg.Lookup(v)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return sinkFromDeployment(d)
	}
	return sink.Parse(v)
}

// sinkFromDeployment turns a deployment into a sink: a plain sink when one
// URL serves every layer, else a layered sink routing each record to the
// store of its layer.
func sinkFromDeployment(d deployment.Deployment) (*sink.Spec, error) {
	return sink.ParseLayers(sink.Layers{
		Name:      d.Name,
		Display:   d.String(),
		Meta:      d.Layer(deployment.MetaLayer),
		Resources: d.Layer(deployment.ResourcesLayer),
		Blobs:     d.Layer(deployment.BlobsLayer),
	})
}
