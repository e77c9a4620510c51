package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/specstar/replicator/compare"
	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
)

var reconcileCmd = &cli.Command{
	Name:  "replicator reconcile",
	Usage: "replicator reconcile --from ARCHIVE|DIR|URL|NAME --to URL|NAME [--dry-run] [--prune] [flags]",
	Summary: `Report how a sink differs from its source and publish the missing or
older records onto the stream for run to apply. --dry-run publishes
nothing and exits 1 when there are differences (like diff). --prune also
purges resources only the sink holds: the purges go onto the shared
stream, so every sink consuming it removes them too.`,
	Examples: []string{
		"replicator reconcile --from dump.acbak --to /srv/specstar --dry-run",
		"replicator reconcile --from postgres://db/app --to /srv/mirror && replicator run --to /srv/mirror --until-drained",
		"replicator reconcile --config deploy.yaml --from primary --to replica --prune --json",
	},
}

// reconcileResult is what reconcile prints with --json.
type reconcileResult struct {
	From        string               `json:"from"`
	To          string               `json:"to"`
	DryRun      bool                 `json:"dry_run"`
	Metas       int64                `json:"metas"`
	Revisions   int64                `json:"revisions"`
	Blobs       int64                `json:"blobs"`
	Differences int64                `json:"differences"`
	Repairs     int64                `json:"repairs"`
	Published   int64                `json:"published"`
	Duplicates  int64                `json:"duplicates"`
	Prune       *compare.PruneResult `json:"prune,omitempty"`
	Detail      any                  `json:"published_by_kind,omitempty"`
}

// cmdReconcile reports how a sink differs from its source and publishes
// the repairs (compare.Reconcile), then with --prune the purges of what
// only the sink holds (compare.Prune).
func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := reconcileCmd.FlagSet(&verbose)
	var bf busFlags
	bf.register(fs)
	var ca comparisonArgs
	ca.register(fs, stderr)
	dryRun := fs.Bool("dry-run", false, "report the differences, publish nothing; exit 1 if there are any")
	prune := fs.Bool("prune", false, "also purge resources only the sink holds (their metas, and revisions up to the meta's time; not blobs); "+
		"the purges go onto the shared stream, so EVERY sink consuming it removes those resources too")
	pos, code, ok := reconcileCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return reconcileCmd.Usagef(stderr, "unexpected arguments %q", pos)
	}
	cs, code := openCompared(ctx, reconcileCmd, &ca, fs, stderr, log)
	if code != exitOK {
		return code
	}
	defer cs.Close()
	spec, from := cs.spec, cs.from
	out := stdout
	if ca.asJSON {
		out = io.Discard
	}

	var (
		lister sink.Lister
		index  *compare.SourceIndex
	)
	if *prune {
		if lister, ok = cs.sink.(sink.Lister); !ok {
			return reconcileCmd.Errorf(stderr, exitError, "sink %s cannot be listed: --prune is not available for it", spec.Raw)
		}
		var err error
		if index, err = compare.NewSourceIndex(ctx, ""); err != nil {
			return reconcileCmd.Errorf(stderr, exitError, "%v", err)
		}
		defer index.Close()
	}

	var fix *compare.BusPublisher
	var pub compare.Publisher // stays nil in a dry run
	if !*dryRun {
		bus, err := bf.open(ctx, fs, log, false)
		if err != nil {
			return reconcileCmd.Errorf(stderr, exitError, "%v", err)
		}
		defer bus.Close()
		fix = compare.NewBusPublisher(bus, 256, "-reconcile-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		pub = fix
	}

	st, err := compare.Reconcile(ctx, cs.src, cs.reader, compare.ReconcileOptions{Scope: scopeOf(spec), Fix: pub, Out: out, Index: index})
	cs.meter.Stop(err)
	if err != nil {
		return reconcileCmd.Fail(stderr, cli.InputCode(err), from, err)
	}
	res := reconcileResult{From: from, To: spec.Raw, DryRun: *dryRun, Metas: int64(st.Metas), Revisions: int64(st.Revisions),
		Blobs: int64(st.Blobs), Differences: int64(st.Differences), Repairs: int64(st.Repairs)}
	if !ca.asJSON {
		fmt.Fprintf(stdout, "%s vs %s: %d metas, %d revisions, %d blobs compared, %d differences, %d to repair\n",
			from, spec.Raw, st.Metas, st.Revisions, st.Blobs, st.Differences, st.Repairs)
	}
	var (
		pr   = &compare.PruneResult{}
		perr error
	)
	if *prune {
		pmeter := progress.New("reconcile --prune "+spec.Raw, 0, log)
		pr, perr = compare.Prune(ctx, lister, cs.reader, index, compare.PruneOptions{
			Models: spec.Models, Fix: pub, Out: out, Progress: func(n int) { pmeter.Update(int64(n), 0) },
		})
		pmeter.Stop(perr)
		res.Prune = pr
	}
	if fix != nil {
		// What was published before a failed prune pass is sent all the same.
		if ferr := fix.Flush(ctx); ferr != nil {
			return reconcileCmd.Errorf(stderr, exitError, "flush: %v", ferr)
		}
	}
	if perr != nil {
		return reconcileCmd.Errorf(stderr, exitError, "--prune: sink %s: %v", spec.Raw, perr)
	}
	if *prune && !ca.asJSON {
		fmt.Fprintf(stdout, "prune: %d sink resources checked in %d models, %d only in the sink, %d to purge, %d left alone\n",
			pr.Checked, pr.Models, pr.OnlyInSink, pr.Purges, pr.LeftAlone)
	}
	if fix == nil {
		if ca.asJSON {
			cli.JSON(stdout, res)
		} else {
			fmt.Fprintf(stdout, "dry run: 0 records published\n")
		}
		if st.Differences > 0 || pr.Purges > 0 {
			return exitDiffer
		}
		return exitOK
	}
	p := st.Published
	res.Published = int64(p.Metas + p.Revisions + p.Blobs + pr.Purges)
	res.Duplicates = int64(fix.Duplicates())
	res.Detail = map[string]int{"metas": p.Metas, "revisions": p.Revisions, "blobs": p.Blobs}
	if ca.asJSON {
		cli.JSON(stdout, res)
		return exitOK
	}
	then := ""
	if res.Published > 0 {
		then = "; `replicator run` applies them"
	}
	purges := ""
	if *prune {
		purges = fmt.Sprintf(", %d purges", pr.Purges)
	}
	fmt.Fprintf(stdout, "%d records published (%d metas, %d revisions, %d blobs%s; %d dropped as duplicates)%s\n",
		res.Published, p.Metas, p.Revisions, p.Blobs, purges, fix.Duplicates(), then)
	return exitOK
}
