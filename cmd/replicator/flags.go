package main

// The flags the replicator's commands share: the stream (busFlags), the
// sinks written (sinkArgs: --to, --sink, --meta/--resources/--blobs) and
// the source read (sourceArgs: --from, --from-meta/--from-resources/
// --from-blobs), with their deprecated spellings.

import (
	"context"
	"flag"
	"io"
	"iter"
	"log/slog"
	"os"
	"slices"
	"time"

	srcarchive "github.com/specstar/replicator/source/archive"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/stream"
)

// busFlags are the flags every command that talks to the stream takes.
type busFlags struct {
	cfg stream.Config
}

// register adds the flags of a command that may create the stream: the
// connection's and the stream's settings.
func (b *busFlags) register(fs *flag.FlagSet) {
	b.registerConn(fs)
	fs.IntVar(&b.cfg.Replicas, "replicas", 1, "stream replicas (clustered servers)")
	fs.DurationVar(&b.cfg.MaxAge, "max-age", 0, "stream retention by age (0: unlimited)")
	fs.Int64Var(&b.cfg.MaxBytes, "max-bytes", 0, "stream retention by size (0: unlimited)")
	fs.StringVar(&b.cfg.Retention, "retention", "limits", "stream retention policy: limits, interest or workqueue")
	fs.DurationVar(&b.cfg.DuplicateWindow, "duplicate-window", time.Hour, "how long JetStream drops re-published records by message id")
}

// registerConn adds the flags that say where the stream is, and only
// those: a read-only command (status, dlq list, stream info) creates no
// stream, so it lists no stream settings; whether it is a mirror (and of
// what) is where it is, so every command takes the mirror flags.
func (b *busFlags) registerConn(fs *flag.FlagSet) {
	b.cfg.Replicas, b.cfg.Retention, b.cfg.DuplicateWindow = 1, "limits", time.Hour // register's defaults
	fs.StringVar(&b.cfg.URL, "nats", os.Getenv("NATS_URL"), "NATS server URL (default $NATS_URL; empty runs an embedded JetStream server)")
	fs.StringVar(&b.cfg.Stream, "stream", "SPECSTAR", "JetStream stream name")
	fs.StringVar(&b.cfg.SubjectPrefix, "subject-prefix", "specstar", "subject prefix of events")
	fs.StringVar(&b.cfg.DataDir, "data-dir", stream.DefaultDataDir(), "embedded server's data directory")
	fs.StringVar(&b.cfg.Domain, "domain", "", "JetStream domain of the embedded server")
	b.cfg.RegisterMirror(fs)
	b.cfg.RegisterSyncInterval(fs)
	b.cfg.Auth.Register(fs)
}

// open connects to the stream with the settings the command line (or
// --config) gave explicitly marked as given, so an existing stream is
// checked against them and never reset to this command's defaults.
// readOnly commands create nothing.
func (b *busFlags) open(ctx context.Context, fs *flag.FlagSet, log *slog.Logger, readOnly bool) (*stream.Bus, error) {
	cfg := b.cfg
	cfg.ReadOnly = readOnly
	cfg.Given = map[string]bool{}
	if fs != nil { // nil: no setting counts as given
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains(stream.Settings, f.Name) {
				cfg.Given[f.Name] = true
			}
		})
	}
	return stream.Open(ctx, cfg, log)
}

// configOnly is --config for the commands that name no deployment (status,
// dlq, stream): the file's nats settings fill the bus flags the command
// line left unset, so a region's status is `replicator status --config b.yaml`.
type configOnly struct{ path string }

func (c *configOnly) register(fs *flag.FlagSet) {
	fs.StringVar(&c.path, "config", os.Getenv("SPECSTAR_CONFIG"), "YAML file whose nats settings apply (default $SPECSTAR_CONFIG)")
}

// load reads the file, if any (nil without one), into fs's unset flags.
func (c *configOnly) load(fs *flag.FlagSet) (*deployment.Config, error) {
	if c.path == "" {
		return nil, nil
	}
	cfg, err := deployment.Load(c.path)
	if err != nil {
		return nil, err
	}
	return cfg, cfg.ApplyFlags(fs)
}

// sinkArgs name what is written: --to (repeatable where many sinks are
// served, --sink its synonym; a URL or a deployment of the --config file)
// and a deployment given layer by layer with --meta, --resources and
// --blobs; --config is registered with them.
type sinkArgs struct {
	sinks cli.Multi
	dep   deployment.Flags
}

func (a *sinkArgs) register(fs *flag.FlagSet, usage string) {
	fs.Var(&a.sinks, "to", usage)
	fs.Var(&a.sinks, "sink", "same as --to")
	a.dep.Register(fs, "written")
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

// sinkNamed is the sink a --to value names: a deployment of cfg, or a
// sink URL.
func sinkNamed(cfg *deployment.Config, v string) (*sink.Spec, error) {
	d, ok, err := cfg.Lookup(v)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return sinkFromDeployment(d)
	}
	if err := cfg.CheckName(v); err != nil {
		return nil, err
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

// sourceArgs name what is read: --from (an archive path, a URL, or a
// deployment of the --config file), or a deployment given layer by layer
// with --from-meta, --from-resources and --from-blobs; the old
// --archive, --source, --source-resources and --source-blobs are
// deprecated spellings.
type sourceArgs struct {
	from    string
	layers  deployment.Flags // Meta, Resources, Blobs of the source
	lenient bool
}

func (a *sourceArgs) register(fs *flag.FlagSet, stderr io.Writer) {
	fs.StringVar(&a.from, "from", "", "what is read: an .acbak archive, disk:/path, postgres://..., s3://..., or a deployment of --config")
	fs.StringVar(&a.layers.Meta, "from-meta", "", "the source's meta store, when given layer by layer: disk:/path, postgres://... or redis://...[&slow=URL]")
	fs.StringVar(&a.layers.Resources, "from-resources", "", "the source's resource store when not in its meta store: s3://bucket/{model}/data/?endpoint=...")
	fs.StringVar(&a.layers.Blobs, "from-blobs", "", "the source's blob store (s3://... or disk:/path): blobs its payloads reference are read there")
	fs.BoolVar(&a.lenient, "lenient", false, "read an archive leniently (see writer verify)")
	cli.Alias(fs, "archive", "from", stderr)
	cli.Alias(fs, "source", "from", stderr)
	cli.Alias(fs, "source-resources", "from-resources", stderr)
	cli.Alias(fs, "source-blobs", "from-blobs", stderr)
}

// given reports whether a source was named.
func (a *sourceArgs) given() bool { return a.from != "" || a.layers.Meta != "" }

// open returns the source the flags name (see source.Resolve); a source
// that cannot be opened fails when read, as one that cannot be reached
// does. progress may be nil.
func (a *sourceArgs) open(cfg *deployment.Config, progress func(int, int64)) (source.Source, string) {
	spec, err := deployment.SourceSpec(cfg, a.from, a.layers, source.Spec{
		Archive: acbak.Options{Lenient: a.lenient}, Progress: progress,
	})
	if err != nil {
		return failedSource{err}, a.from
	}
	src, err := source.Open(spec)
	if err != nil {
		return failedSource{err}, spec.Name
	}
	if _, isArchive := src.(*srcarchive.Source); !isArchive && progress != nil {
		// A live source reports no progress of its own: count what it yields.
		src = source.Metered(src, progress)
	}
	return src, spec.Name
}

// failedSource is a source that could not be opened: reading it yields
// the error.
type failedSource struct{ err error }

func (f failedSource) Records(context.Context) iter.Seq2[source.Record, error] {
	return func(yield func(source.Record, error) bool) { yield(source.Record{}, f.err) }
}
