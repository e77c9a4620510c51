package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	srcarchive "github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

// registerConfig adds the flags that tune every sink's consumer.
func registerConfig(fs *flag.FlagSet, c *replicate.Config) {
	d := replicate.DefaultConfig()
	fs.IntVar(&c.Batch, "batch", d.Batch, "events applied, made durable and acked together")
	fs.IntVar(&c.MaxAckPending, "max-ack-pending", d.MaxAckPending, "unacknowledged events JetStream lets one sink hold")
	fs.DurationVar(&c.AckWait, "ack-wait", d.AckWait, "redeliver an event not acked within this time")
	fs.IntVar(&c.Parallel, "parallel", d.Parallel, "events of a batch applied at once")
	fs.BoolVar(&c.AcceptGap, "accept-gap", false, "go on when the stream no longer holds events a sink never applied (retention removed them)")
	fs.DurationVar(&c.MirrorWait, "mirror-wait", d.MirrorWait, "with --until-drained on a mirror: how long to wait for it to catch up with its origin before draining what it holds")
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var bf busFlags
	bf.register(fs)
	var wc replicate.Config
	registerConfig(fs, &wc)
	var sa sinkArgs
	sa.register(fs, "sink (repeatable): disk:/path[?options], postgres://..., s3://bucket/prefix?endpoint=..., or a deployment of --config")
	fs.BoolVar(&wc.UntilDrained, "until-drained", false, "exit 0 once every sink has applied everything the stream held at start")
	listen := fs.String("listen", "127.0.0.1:9464", "address for /metrics, /healthz and /readyz (empty: off)")
	pos, ok := parse(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	_, specs, err := sa.resolve(fs)
	if err != nil {
		fmt.Fprintf(stderr, "replicator run: %v\n", err)
		return exitUsage
	}
	if len(pos) != 0 || len(specs) == 0 {
		fmt.Fprintln(stderr, "replicator run: want one or more --sink (or --meta/--resources/--blobs) and no other arguments")
		return exitUsage
	}
	bus, err := bf.open(ctx, fs, log, false)
	if err != nil {
		fmt.Fprintf(stderr, "replicator run: %v\n", err)
		return exitFailed
	}
	defer bus.Close()
	m, err := serveMetrics(ctx, *listen, bus.Connected, log)
	if err != nil {
		fmt.Fprintf(stderr, "replicator run: %v\n", err)
		return exitFailed
	}
	workers, err := runWorkers(ctx, bus, specs, wc, m, log)
	for i, w := range workers {
		st := w.Stats()
		fmt.Fprintf(stdout, "sink %s (%s): %d events applied, %d dead-lettered\n", specs[i].Raw, w.Name(), st.Applied, st.DeadLettered)
	}
	if err != nil && !(errors.Is(err, context.Canceled) && !wc.UntilDrained) {
		fmt.Fprintf(stderr, "replicator run: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// runWorkers opens every sink and runs one replicate.Worker for each on
// its own durable consumer until all are done (until-drained) or ctx
// ends, then closes the sinks.
func runWorkers(ctx context.Context, bus *stream.Bus, specs []*sink.Spec, wc replicate.Config, m *replicate.Metrics, log *slog.Logger) ([]*replicate.Worker, error) {
	sinks := make([]sink.Sink, 0, len(specs))
	closeAll := func() {
		for _, sk := range sinks {
			sk.Close()
		}
	}
	workers := make([]*replicate.Worker, 0, len(specs))
	for _, spec := range specs {
		sk, err := spec.Open(ctx)
		if err != nil {
			closeAll()
			return nil, err
		}
		sinks = append(sinks, sk)
		w, err := replicate.NewWorker(bus, sk, replicate.Options{
			Config: wc, Name: spec.Name, Display: spec.Raw, Models: spec.Models, Logger: log, Metrics: m,
		})
		if err != nil {
			closeAll()
			return nil, err
		}
		workers = append(workers, w)
	}
	errs := replicate.RunAll(ctx, workers...)
	var all []error
	for i, spec := range specs {
		if err := sinks[i].Close(); err != nil {
			all = append(all, fmt.Errorf("close sink %s: %w", spec.Raw, err))
		}
		if errs[i] != nil {
			all = append(all, fmt.Errorf("sink %s: %w", spec.Raw, errs[i]))
		}
	}
	return workers, errors.Join(all...)
}

func cmdMirror(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("mirror", flag.ContinueOnError)
	from := fs.String("from", "", "archive to replay")
	to := fs.String("to", "", "directory of the SpecStar disk deployment to write (or a sink URL, or a deployment of --config)")
	var dep deployment.Flags
	dep.Register(fs, "sink")
	dataDir := fs.String("data-dir", "", "embedded server's data directory (default: a temporary one, removed afterwards)")
	lenient := fs.Bool("lenient", false, "accept what SpecStar's loader accepts (see writer verify)")
	dupWindow := fs.Duration("duplicate-window", time.Hour, "how long the embedded stream drops re-published records by message id (its memory grows with the events in this window)")
	var wc replicate.Config
	registerConfig(fs, &wc)
	pos, ok := parse(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if len(pos) != 0 || *from == "" || (*to == "") == !dep.Layered() {
		fmt.Fprintln(stderr, "replicator mirror: want --from ARCHIVE, and --to DIR (or --meta/--resources/--blobs)")
		return exitUsage
	}
	sa := sinkArgs{dep: dep}
	if *to != "" {
		sa.sinks = multiFlag{*to}
	}
	_, specs, err := sa.resolve(fs)
	if err != nil {
		fmt.Fprintf(stderr, "replicator mirror: %v\n", err)
		return exitUsage
	}
	spec := specs[0]
	dir := *dataDir
	if dir == "" {
		tmp, err := stream.TempDataDir() // sweeps those killed mirrors left
		if err != nil {
			fmt.Fprintf(stderr, "replicator mirror: %v\n", err)
			return exitFailed
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	start := time.Now()
	bus, err := stream.Open(ctx, stream.Config{DataDir: dir, DuplicateWindow: *dupWindow}, log)
	if err != nil {
		fmt.Fprintf(stderr, "replicator mirror: %v\n", err)
		return exitFailed
	}
	defer bus.Close()
	f, err := os.Open(*from)
	if err != nil {
		fmt.Fprintf(stderr, "replicator mirror: %v\n", err)
		return exitFailed
	}
	defer f.Close()
	st, _ := f.Stat()
	meter := progress.New("replay "+*from, st.Size(), log)
	pub := bus.NewPublisher(512)
	rs, err := srcarchive.Replay(ctx, f, acbak.Options{Size: st.Size(), Lenient: *lenient}, bus.Prefix(), bus.BlobBucket(), pub,
		func(n int, off int64) { meter.Update(int64(n), off) })
	if err == nil {
		err = pub.Flush(ctx)
	}
	meter.Update(int64(rs.Frames), rs.Bytes)
	meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "replicator mirror: replay %s: %v\n", *from, err)
		return exitFailed
	}
	wc.UntilDrained = true
	workers, err := runWorkers(ctx, bus, []*sink.Spec{spec}, wc, nil, log)
	if err != nil {
		fmt.Fprintf(stderr, "replicator mirror: %v\n", err)
		return exitFailed
	}
	w := workers[0].Stats()
	fmt.Fprintf(stdout, "mirrored %s into %s in %s: %d metas, %d revisions, %d blobs (%d through the object store), %d events applied, %d dead-lettered\n",
		*from, spec.Where(), time.Since(start).Round(time.Millisecond), rs.Metas, rs.Revisions, rs.Blobs, rs.LargeBlobs, w.Applied, w.DeadLettered)
	for _, warn := range rs.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", warn.Error())
	}
	if w.DeadLettered > 0 {
		return exitFailed
	}
	return exitOK
}
