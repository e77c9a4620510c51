package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/specstar/replicator/compare"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
)

// cmdReconcile reports how a sink differs from its source and publishes
// the repairs (compare.Reconcile), then with --prune the purges of what
// only the sink holds (compare.Prune).
func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	var bf busFlags
	bf.register(fs)
	var ca comparisonArgs
	ca.register(fs)
	dryRun := fs.Bool("dry-run", false, "report the differences, publish nothing")
	prune := fs.Bool("prune", false, "also purge resources only the sink holds (their metas, and revisions up to the meta's time; not blobs); "+
		"the purges go onto the shared stream, so EVERY sink consuming it removes those resources too")
	pos, ok := parse(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if len(pos) != 0 || !ca.usable() {
		fmt.Fprintln(stderr, "replicator reconcile: want --archive ARCHIVE or --source DEPLOYMENT, and --sink URL")
		return exitUsage
	}
	cs, code := openCompared(ctx, "reconcile", ca, fs, stderr, log)
	if code != exitOK {
		return code
	}
	defer cs.Close()
	spec, from := cs.spec, cs.from

	var (
		lister sink.Lister
		index  *compare.SourceIndex
	)
	if *prune {
		if lister, ok = cs.sink.(sink.Lister); !ok {
			fmt.Fprintf(stderr, "replicator reconcile: sink %s cannot be listed: --prune is not available for it\n", spec.Raw)
			return exitFailed
		}
		var err error
		if index, err = compare.NewSourceIndex(ctx, ""); err != nil {
			fmt.Fprintf(stderr, "replicator reconcile: %v\n", err)
			return exitFailed
		}
		defer index.Close()
	}

	var fix *compare.BusPublisher
	var pub compare.Publisher // stays nil in a dry run
	if !*dryRun {
		bus, err := bf.open(ctx, fs, log, false)
		if err != nil {
			fmt.Fprintf(stderr, "replicator reconcile: %v\n", err)
			return exitFailed
		}
		defer bus.Close()
		fix = compare.NewBusPublisher(bus, 256, "-reconcile-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		pub = fix
	}

	st, err := compare.Reconcile(ctx, cs.src, cs.reader, compare.ReconcileOptions{Scope: scopeOf(spec), Fix: pub, Out: stdout, Index: index})
	cs.meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "replicator reconcile: %s: %v\n", from, err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "%s vs %s: %d metas, %d revisions, %d blobs compared, %d differences, %d to repair\n",
		from, spec.Raw, st.Metas, st.Revisions, st.Blobs, st.Differences, st.Repairs)
	var (
		pr   = &compare.PruneResult{}
		perr error
	)
	if *prune {
		pmeter := progress.New("reconcile --prune "+spec.Raw, 0, log)
		pr, perr = compare.Prune(ctx, lister, cs.reader, index, compare.PruneOptions{
			Models: spec.Models, Fix: pub, Out: stdout, Progress: func(n int) { pmeter.Update(int64(n), 0) },
		})
		pmeter.Done()
	}
	if fix != nil {
		// What was published before a failed prune pass is sent all the same.
		if ferr := fix.Flush(ctx); ferr != nil {
			fmt.Fprintf(stderr, "replicator reconcile: flush: %v\n", ferr)
			return exitFailed
		}
	}
	if perr != nil {
		fmt.Fprintf(stderr, "replicator reconcile: --prune: sink %s: %v\n", spec.Raw, perr)
		return exitFailed
	}
	if *prune {
		fmt.Fprintf(stdout, "prune: %d sink resources checked in %d models, %d only in the sink, %d to purge, %d left alone\n",
			pr.Checked, pr.Models, pr.OnlyInSink, pr.Purges, pr.LeftAlone)
	}
	if fix == nil {
		fmt.Fprintf(stdout, "dry run: 0 records published\n")
		return exitOK
	}
	p := st.Published
	published := p.Metas + p.Revisions + p.Blobs + pr.Purges
	then := ""
	if published > 0 {
		then = "; `replicator run` applies them"
	}
	purges := ""
	if *prune {
		purges = fmt.Sprintf(", %d purges", pr.Purges)
	}
	fmt.Fprintf(stdout, "%d records published (%d metas, %d revisions, %d blobs%s; %d dropped as duplicates)%s\n",
		published, p.Metas, p.Revisions, p.Blobs, purges, fix.Duplicates(), then)
	return exitOK
}
