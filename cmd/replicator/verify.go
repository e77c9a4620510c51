package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	pgsource "github.com/specstar/replicator/source/postgres"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/compare"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source"
)

// scopeOf says which kinds of record the sink keeps (a Postgres sink keeps
// no blobs, and revisions only if configured to).
func scopeOf(s *sink.Spec) compare.Scope {
	revisions, blobs := s.Holds()
	return compare.Scope{NoRevisions: !revisions, NoBlobs: !blobs}
}

// comparisonArgs are the flags verify and reconcile share: the sink, and
// the source of truth (an archive, or a live deployment given by URL, by
// name in --config, or as --source plus --source-resources and
// --source-blobs).
type comparisonArgs struct {
	archive, source, sink        string
	sourceResources, sourceBlobs string
	config                       string
	lenient                      bool
}

func (a *comparisonArgs) register(fs *flag.FlagSet) {
	fs.StringVar(&a.archive, "archive", "", "archive holding what the sink should hold")
	fs.StringVar(&a.source, "source", "", "or a live SpecStar deployment: postgres://... (its meta store), or a deployment of --config")
	fs.StringVar(&a.sourceResources, "source-resources", "", "the source deployment's resource store when not in Postgres: s3://bucket/{model}/data/?endpoint=...")
	fs.StringVar(&a.sourceBlobs, "source-blobs", "", "the source deployment's blob store (s3://... or disk:/path): blobs its payloads reference are checked in the sink")
	fs.StringVar(&a.sink, "sink", "", "sink: a URL or a deployment of --config")
	fs.StringVar(&a.config, "config", os.Getenv("SPECSTAR_CONFIG"), "YAML file with named deployments (default $SPECSTAR_CONFIG)")
	fs.BoolVar(&a.lenient, "lenient", false, "read the archive leniently (see writer verify)")
}

// usable reports whether exactly one source and a sink are given.
func (a *comparisonArgs) usable() bool {
	return (a.archive == "") != (a.source == "") && a.sink != ""
}

// openCompared opens the sink to read back and the source of truth that
// verify and reconcile compare; fs, if not nil, gets the config file's
// nats settings. cmd names the command in messages; code is the exit
// status on failure.
func openCompared(ctx context.Context, cmd string, a comparisonArgs, fs *flag.FlagSet, stderr io.Writer, log *slog.Logger) (c *comparisonSetup, code int) {
	var cfg *deployment.Config
	var err error
	if a.config != "" {
		cfg, err = deployment.Load(a.config)
	}
	if err == nil && fs != nil {
		err = cfg.ApplyFlags(fs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
		return nil, exitUsage
	}
	spec, err := sinkNamed(cfg, a.sink)
	if err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
		return nil, exitUsage
	}
	var live *deployment.Deployment
	if a.source != "" {
		d, ok, err := cfg.Lookup(a.source)
		if err != nil {
			fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
			return nil, exitUsage
		}
		if !ok {
			d = deployment.Deployment{Meta: a.source}
			if deployment.Scheme(a.source) == "postgres" && a.sourceResources == "" {
				d.Resources = a.source
				if _, opts, err := pgsource.ParseURL(a.source); err == nil && !opts.Revisions {
					d.Resources = ""
				}
			}
		}
		if a.sourceResources != "" {
			d.Resources = a.sourceResources
		}
		if a.sourceBlobs != "" {
			d.Blobs = a.sourceBlobs
		}
		if d, err = d.Resolved(); err != nil {
			fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
			return nil, exitUsage
		}
		live = &d
	}
	if root := spec.DiskRoot(); root != "" {
		if _, err := os.Stat(root); err != nil {
			fmt.Fprintf(stderr, "replicator %s: sink %s: %v\n", cmd, spec.Raw, err)
			return nil, exitFailed
		}
	}
	snk, err := spec.OpenReader(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
		return nil, exitFailed
	}
	reader, ok := snk.(sink.Reader)
	if !ok {
		snk.Close()
		fmt.Fprintf(stderr, "replicator %s: sink %s cannot be read back\n", cmd, spec.Raw)
		return nil, exitFailed
	}
	var size int64
	if st, err := os.Stat(a.archive); err == nil && a.archive != "" {
		size = st.Size()
	}
	c = &comparisonSetup{spec: spec, sink: snk, reader: reader, meter: progress.New(cmd+" "+spec.Raw, size, log), from: a.archive}
	c.src = openSource(a.archive, acbak.Options{Lenient: a.lenient}, c.meter, live)
	if live != nil {
		c.from = live.String()
	}
	return c, exitOK
}

// comparisonSetup is what openCompared opened; Close releases the sink.
type comparisonSetup struct {
	spec   *sink.Spec
	sink   sink.Sink
	reader sink.Reader
	src    source.Source
	from   string // the source, for messages
	meter  *progress.Meter
}

func (c *comparisonSetup) Close() { c.sink.Close() }

// cmdVerify compares a sink with its source (compare.Verify).
func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var ca comparisonArgs
	ca.register(fs)
	pos, ok := parse(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if len(pos) != 0 || !ca.usable() {
		fmt.Fprintln(stderr, "replicator verify: want --archive ARCHIVE or --source DEPLOYMENT, and --sink URL")
		return exitUsage
	}
	cs, code := openCompared(ctx, "verify", ca, nil, stderr, log)
	if code != exitOK {
		return code
	}
	defer cs.Close()
	c, err := compare.Verify(ctx, cs.src, cs.reader, compare.VerifyOptions{Scope: scopeOf(cs.spec), Out: stdout})
	cs.meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "replicator verify: %s: %v\n", cs.from, err)
		return exitFailed
	}
	verdict := "equal"
	if c.Differences > 0 {
		verdict = "DIFFERENT"
	}
	fmt.Fprintf(stdout, "%s vs %s: %s: %d metas, %d revisions, %d blobs compared, %d differences\n",
		cs.from, cs.spec.Raw, verdict, c.Metas, c.Revisions, c.Blobs, c.Differences)
	if c.Differences > 0 {
		return exitFailed
	}
	return exitOK
}
