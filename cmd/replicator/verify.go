package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/specstar/replicator/compare"
	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source"
)

var verifyCmd = &cli.Command{
	Name:  "replicator verify",
	Usage: "replicator verify --from ARCHIVE|DIR|URL|NAME --to URL|NAME [flags]",
	Summary: `Compare a sink with its source: an archive, a disk deployment, a live
Postgres (+S3, +disk) deployment read from one snapshot of its meta store,
an S3 store, or a deployment of --config; metas, revisions (info and
payload) and blobs. Exit 0 if equal, 1 if they differ.`,
	Examples: []string{
		"replicator verify --from dump.acbak --to /srv/specstar",
		"replicator verify --from postgres://db/app --from-resources s3://bkt/{model}/data/ --to /srv/mirror --json",
		"replicator verify --config deploy.yaml --from primary --to replica",
	},
}

// scopeOf says which kinds of record the sink keeps (a Postgres sink keeps
// no blobs).
func scopeOf(s *sink.Spec) compare.Scope {
	revisions, blobs := s.Holds()
	return compare.Scope{NoRevisions: !revisions, NoBlobs: !blobs}
}

// comparisonArgs are the flags verify and reconcile share: the source of
// truth (--from, layer by layer --from-*) and the sink (--to).
type comparisonArgs struct {
	src    sourceArgs
	sinks  sinkArgs
	asJSON bool
}

func (a *comparisonArgs) register(fs *flag.FlagSet, stderr io.Writer) {
	a.src.register(fs, stderr)
	a.sinks.register(fs, "what is compared with the source: a sink URL or a deployment of --config")
	fs.BoolVar(&a.asJSON, "json", false, "print the result as one JSON object")
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

// openCompared opens the sink to read back and the source of truth that
// verify and reconcile compare; the config file's nats settings go to fs.
func openCompared(ctx context.Context, c *cli.Command, a *comparisonArgs, fs *flag.FlagSet, stderr io.Writer, log *slog.Logger) (*comparisonSetup, int) {
	if !a.src.given() {
		return nil, c.Usagef(stderr, "want --from ARCHIVE|DIR|URL|NAME and --to URL|NAME")
	}
	cfg, specs, err := a.sinks.resolve(fs)
	if err != nil {
		return nil, c.Usagef(stderr, "%v", err)
	}
	if len(specs) != 1 {
		return nil, c.Usagef(stderr, "want one --to URL|NAME (or --meta/--resources/--blobs), got %d", len(specs))
	}
	spec := specs[0]
	if root := spec.DiskRoot(); root != "" {
		if _, err := os.Stat(root); os.IsNotExist(err) {
			return nil, c.Errorf(stderr, exitError, "sink %s: no such directory", spec.Raw)
		} else if err != nil {
			return nil, c.Fail(stderr, exitError, "sink "+spec.Raw, err)
		}
	}
	snk, err := spec.OpenReader(ctx)
	if err != nil {
		return nil, c.Errorf(stderr, exitError, "%v", err)
	}
	reader, ok := snk.(sink.Reader)
	if !ok {
		snk.Close()
		return nil, c.Errorf(stderr, exitError, "sink %s cannot be read back", spec.Raw)
	}
	var size int64
	if st, err := os.Stat(a.src.from); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	cs := &comparisonSetup{spec: spec, sink: snk, reader: reader, meter: progress.New(c.Name+" "+spec.Raw, size, log)}
	cs.src, cs.from = a.src.open(cfg, func(frames int, off int64) { cs.meter.Update(int64(frames), off) })
	return cs, exitOK
}

// verifyResult is what verify prints with --json.
type verifyResult struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Equal       bool   `json:"equal"`
	Metas       int64  `json:"metas"`
	Revisions   int64  `json:"revisions"`
	Blobs       int64  `json:"blobs"`
	Differences int64  `json:"differences"`
}

// cmdVerify compares a sink with its source (compare.Verify).
func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := verifyCmd.FlagSet(&verbose)
	var ca comparisonArgs
	ca.register(fs, stderr)
	pos, code, ok := verifyCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return verifyCmd.Usagef(stderr, "unexpected arguments %q", pos)
	}
	cs, code := openCompared(ctx, verifyCmd, &ca, fs, stderr, log)
	if code != exitOK {
		return code
	}
	defer cs.Close()
	out := stdout
	if ca.asJSON {
		out = io.Discard // the differences are counted in the object
	}
	c, err := compare.Verify(ctx, cs.src, cs.reader, compare.VerifyOptions{Scope: scopeOf(cs.spec), Out: out})
	cs.meter.Stop(err)
	if err != nil {
		return verifyCmd.Fail(stderr, cli.InputCode(err), cs.from, err)
	}
	res := verifyResult{From: cs.from, To: cs.spec.Raw, Equal: c.Differences == 0,
		Metas: int64(c.Metas), Revisions: int64(c.Revisions), Blobs: int64(c.Blobs), Differences: int64(c.Differences)}
	if ca.asJSON {
		cli.JSON(stdout, res)
	} else {
		verdict := "equal"
		if !res.Equal {
			verdict = "DIFFERENT"
		}
		cli.Printf(stdout, "%s vs %s: %s: %d metas, %d revisions, %d blobs compared, %d differences\n",
			res.From, res.To, verdict, res.Metas, res.Revisions, res.Blobs, res.Differences)
	}
	if !res.Equal {
		return exitDiffer
	}
	return exitOK
}
