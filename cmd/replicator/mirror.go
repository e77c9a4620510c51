package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	srcarchive "github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

var mirrorCmd = &cli.Command{
	Name:  "replicator mirror",
	Usage: "replicator mirror --from ARCHIVE --to DIR|URL|NAME (or --meta/--resources/--blobs) [flags]",
	Summary: `One command on an embedded JetStream server: replay the archive,
materialize it into a sink, print a summary. Serves no metrics. A disk
sink makes each batch durable with one syncfs (sync=batch) unless its URL
says sync=file: a killed or power-cut mirror is run again, and that
rewrites whatever the cut left torn.`,
	Examples: []string{
		"replicator mirror --from dump.acbak --to /srv/specstar",
		"replicator mirror --from dump.acbak --to 'disk:/srv/specstar?meta=sqlite' --json",
	},
}

// mirrorSummary is what mirror prints with --json.
type mirrorSummary struct {
	From         string   `json:"from"`
	To           string   `json:"to"`
	Seconds      float64  `json:"seconds"`
	ReplaySecs   float64  `json:"replay_seconds"` // of Seconds, until the archive was all on the stream (the sink applies meanwhile)
	Metas        int      `json:"metas"`
	Revisions    int      `json:"revisions"`
	Blobs        int      `json:"blobs"`
	LargeBlobs   int      `json:"large_blobs"`
	Sync         string   `json:"sync,omitempty"` // a disk sink's durability: "batch" or "file"
	Applied      int64    `json:"applied"`
	DeadLettered int64    `json:"dead_lettered"`
	Warnings     []string `json:"warnings"`
}

// mirrorAhead is how far (in events) a mirror's replay may run ahead of
// its sink: it bounds the embedded stream's backlog, and with the
// duplicate window the message ids the server keeps in memory.
const mirrorAhead = 8192

// mirrorAheadBytes bounds the same backlog in payload bytes: the paced
// stream is held in memory (stream.Config.InMemory).
const mirrorAheadBytes = 32 << 20

// mirrorMemory is the mirror's default soft memory limit (see
// runtime/debug.SetMemoryLimit): the pipeline holds at most mirrorAhead
// events, so above this the garbage collector runs rather than the heap
// growing.
const mirrorMemory = 96 << 20

func cmdMirror(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) (code int) {
	var verbose bool
	fs := mirrorCmd.FlagSet(&verbose)
	from := fs.String("from", "", "the archive to replay")
	var sa sinkArgs
	sa.register(fs, "what is written: a directory (SpecStar disk deployment), a sink URL, or a deployment of --config")
	dataDir := fs.String("data-dir", "", "embedded server's data directory (default: a temporary one, removed afterwards)")
	lenient := fs.Bool("lenient", false, "accept what SpecStar's loader accepts (see writer verify)")
	dupWindow := fs.Duration("duplicate-window", 15*time.Second, "how long the embedded stream drops re-published records by message id (its memory grows with the events in this window; a duplicate after it is applied again, which changes nothing)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	var wc replicate.Config
	registerConfig(fs, &wc)
	pos, code, ok := mirrorCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return mirrorCmd.Usagef(stderr, "unexpected arguments %q", pos)
	}
	if *from == "" || (len(sa.sinks) == 0) == !sa.dep.Layered() || len(sa.sinks) > 1 {
		return mirrorCmd.Usagef(stderr, "want --from ARCHIVE, and one --to DIR (or --meta/--resources/--blobs)")
	}
	_, specs, err := sa.resolve(fs)
	if err != nil {
		return mirrorCmd.Usagef(stderr, "%v", err)
	}
	spec := specs[0]
	// The stream lives as long as this process: an ack promises nothing
	// a rerun would not redo, so one syncfs per batch is enough.
	spec.SyncPerBatchUnlessSet()
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft limit for the Go heap, so the peak RSS stays near
		// mirrorMemory whatever the archive (GOMEMLIMIT overrides it).
		debug.SetMemoryLimit(mirrorMemory)
	}
	dir := *dataDir
	if dir == "" {
		tmp, err := stream.TempDataDir() // sweeps those killed mirrors left
		if err != nil {
			return mirrorCmd.Errorf(stderr, exitError, "%v", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	start := time.Now()
	f, err := os.Open(*from)
	if err != nil {
		return mirrorCmd.Fail(stderr, cli.InputCode(err), *from, err)
	}
	defer f.Close()
	// A paced mirror's stream holds only the backlog the replay is ahead,
	// so it is kept in memory and acked events leave it (workqueue): the
	// file store would cache every block it wrote for 10 s, which into a
	// fast sink was most of the mirror's memory and, under the soft limit
	// below, most of its CPU in the collector (BENCHMARKS.md).
	paced := len(spec.Models) == 0
	scfg := stream.Config{DataDir: dir, DuplicateWindow: *dupWindow}
	if paced {
		scfg.InMemory, scfg.Retention = true, "workqueue"
	}
	bus, err := stream.Open(ctx, scfg, log)
	if err != nil {
		return mirrorCmd.Errorf(stderr, exitError, "%v", err)
	}
	defer bus.Close()
	st, _ := f.Stat()
	root := spec.DiskRoot()
	_, statErr := os.Stat(root)
	if root != "" && os.IsNotExist(statErr) {
		// A target this mirror made is not left behind empty when it fails.
		defer func() {
			if code != exitOK {
				os.Remove(root) // only if empty: what was applied stays
			}
		}()
	}
	snk, err := spec.Open(ctx)
	if err != nil {
		return mirrorCmd.Errorf(stderr, exitError, "%v", err)
	}
	// The archive is published while the sink applies it, at most
	// mirrorAhead events ahead (a sink filtered to some models cannot
	// pace the others). The sink then holds at most half of those, so
	// that the rest wait on the stream for its next fetches: batches it
	// could not fetch whole would count as the backlog's end.
	ahead := replicate.Ahead{Events: mirrorAhead, Bytes: mirrorAheadBytes}
	if !paced {
		ahead = replicate.Ahead{}
	} else if wc.MaxAckPending <= 0 || wc.MaxAckPending > mirrorAhead/2 {
		wc.MaxAckPending = mirrorAhead / 2
	}
	worker, err := replicate.NewWorker(bus, snk, replicate.Options{Config: wc, Name: spec.Name, Display: spec.Raw, Models: spec.Models, Logger: log})
	if err != nil {
		snk.Close()
		return mirrorCmd.Errorf(stderr, exitError, "%v", err)
	}
	meter := progress.New("mirror "+*from, st.Size(), log)
	var rs *srcarchive.Stats
	var replayed time.Duration
	replayErr, runErr := replicate.Pipe(ctx, worker, bus.NewPublisher(512), ahead, func(ctx context.Context, pub *replicate.Paced) (err error) {
		rs, err = srcarchive.Replay(ctx, f, acbak.Options{Size: st.Size(), Lenient: *lenient}, bus.Prefix(), bus.BlobBucket(), pub,
			func(n int, off int64) { meter.Update(int64(n), off) })
		replayed = time.Since(start)
		return err
	})
	if rs != nil {
		meter.Update(int64(rs.Frames), rs.Bytes)
	}
	meter.Stop(errors.Join(replayErr, runErr))
	if err := snk.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close sink %s: %w", spec.Raw, err)
	}
	if replayErr != nil {
		return mirrorCmd.Errorf(stderr, exitDiffer, "replay %s: %v", *from, replayErr)
	}
	if runErr != nil {
		return mirrorCmd.Errorf(stderr, exitError, "sink %s: %v", spec.Raw, runErr)
	}
	w := summaries([]*sink.Spec{spec}, []*replicate.Worker{worker})[0]
	sum := mirrorSummary{From: *from, To: spec.Where(), Seconds: time.Since(start).Seconds(), ReplaySecs: replayed.Seconds(), Metas: rs.Metas, Revisions: rs.Revisions,
		Blobs: rs.Blobs, LargeBlobs: rs.LargeBlobs, Sync: spec.Sync(), Applied: w.Applied, DeadLettered: w.DeadLettered, Warnings: []string{}}
	for _, warn := range rs.Warnings {
		sum.Warnings = append(sum.Warnings, warn.Error())
	}
	if *asJSON {
		cli.JSON(stdout, sum)
	} else {
		fmt.Fprintf(stdout, "mirrored %s into %s in %s: %d metas, %d revisions, %d blobs (%d through the object store), %d events applied, %d dead-lettered\n",
			*from, spec.Where(), time.Since(start).Round(time.Millisecond), rs.Metas, rs.Revisions, rs.Blobs, rs.LargeBlobs, w.Applied, w.DeadLettered)
		for _, warn := range sum.Warnings {
			fmt.Fprintf(stdout, "warning: %s\n", warn)
		}
	}
	if w.DeadLettered > 0 {
		return exitDiffer
	}
	return exitOK
}
