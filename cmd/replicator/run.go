package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

var runCommand = &cli.Command{
	Name:  "replicator run",
	Usage: "replicator run --to URL|NAME [--to ...] [--meta URL --resources URL --blobs URL] [--until-drained] [flags]",
	Summary: `Materialize the event stream into each sink through its own durable
consumer. A sink is disk:/path (or a path) with options
?encoding=json|msgpack&meta=files|sqlite&index=uid|symlink&on_duplicate=...
&sync=file|batch&name=N&models=a,b; postgres://... (SpecStar's tables: metas
and revisions); s3://bucket/prefix?endpoint=&region=&path_style=true; a
deployment of the --config file by name; or one deployment given layer by
layer with --meta, --resources and --blobs. As a service it serves
/metrics on --listen; with --until-drained it exits once every sink has
applied what the stream held at start (no listener unless --listen).`,
	Examples: []string{
		"replicator run --to /srv/specstar --to postgres://specstar@db/app",
		"replicator run --to /srv/mirror --until-drained --json",
		"replicator run --meta postgres://db/app --resources s3://bkt/{model}/data/ --blobs s3://bkt/blobs/",
	},
}

// registerConfig adds the flags that tune every sink's consumer.
func registerConfig(fs *flag.FlagSet, c *replicate.Config) {
	d := replicate.DefaultConfig()
	fs.IntVar(&c.Batch, "batch", d.Batch, "events applied, made durable and acked together")
	fs.IntVar(&c.MaxBatch, "max-batch", d.MaxBatch, "while a backlog waits, batches double up to this many events (and --max-ack-pending); fewer, larger transactions")
	fs.Int64Var(&c.MaxBatchBytes, "max-batch-bytes", d.MaxBatchBytes, "payload bytes a grown batch holds at most (0: no bound)")
	fs.IntVar(&c.MaxAckPending, "max-ack-pending", d.MaxAckPending, "unacknowledged events JetStream lets one sink hold")
	fs.DurationVar(&c.AckWait, "ack-wait", d.AckWait, "redeliver an event not acked within this time")
	fs.IntVar(&c.Parallel, "parallel", d.Parallel, "events of a batch applied at once")
	c.MirrorWait = d.MirrorWait
}

// registerStreamConfig adds the consumer flags that only matter on a
// stream this process did not just make (run's, not mirror's).
func registerStreamConfig(fs *flag.FlagSet, c *replicate.Config) {
	fs.BoolVar(&c.AcceptGap, "accept-gap", false, "go on when the stream no longer holds events a sink never applied (retention removed them)")
	fs.DurationVar(&c.MirrorWait, "mirror-wait", c.MirrorWait, "with --until-drained on a mirror: how long to wait for it to catch up with its origin before draining what it holds")
}

// defaultListen is run's metrics address as a service.
const defaultListen = "127.0.0.1:9464"

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := runCommand.FlagSet(&verbose)
	var bf busFlags
	bf.register(fs)
	var wc replicate.Config
	registerConfig(fs, &wc)
	registerStreamConfig(fs, &wc)
	var sa sinkArgs
	sa.register(fs, "what is written (repeatable): disk:/path[?options], postgres://..., s3://bucket/prefix?endpoint=..., or a deployment of --config")
	fs.BoolVar(&wc.UntilDrained, "until-drained", false, "exit once every sink has applied everything the stream held at start")
	unavailable := fs.Duration("unavailable-timeout", defaultUnavailable, "with --until-drained: how long to wait for an unavailable JetStream cluster (leader elections, lost quorum) before failing; without it, run waits as long as it takes")
	listen := fs.String("listen", defaultListen, "address for /metrics, /healthz and /readyz (empty: off; with --until-drained: off unless given)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	pos, code, ok := runCommand.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	_, specs, err := sa.resolve(fs)
	if err != nil {
		return runCommand.Usagef(stderr, "%v", err)
	}
	if len(pos) != 0 || len(specs) == 0 {
		return runCommand.Usagef(stderr, "want one or more --to (or --meta/--resources/--blobs) and no other arguments")
	}
	for _, spec := range specs {
		// Group commit: a batch is acked only once one syncfs has made it
		// durable, and a batch a power loss tore is redelivered and
		// rewritten; per-file fsyncs cannot keep up with a live source.
		spec.SyncPerBatchUnlessSet()
	}
	addr := *listen
	if wc.UntilDrained && !given(fs, "listen") {
		addr = "" // a batch run serves nothing unless asked
	}
	// Serve before connecting: /healthz answers while the stream is
	// still out of reach (a cluster electing leaders), and /readyz says
	// not ready until it answers.
	sctx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	var opened atomic.Pointer[stream.Bus]
	m, err := serveMetrics(sctx, addr, func() bool {
		b := opened.Load()
		return b != nil && b.Connected() && b.Available()
	}, log)
	if errors.Is(err, syscall.EADDRINUSE) {
		return runCommand.Errorf(stderr, exitError, "--listen %s: the address is in use (another replicator run?); give each process its own --listen ADDR, or --listen '' for none", addr)
	}
	if err != nil {
		return runCommand.Errorf(stderr, exitError, "--listen %s: %v", addr, err)
	}
	bf.cfg.UnavailableTimeout = unavailableTimeout(wc.UntilDrained, *unavailable)
	bf.cfg.WaitForServer = !wc.UntilDrained // a service waits for NATS, not ready meanwhile
	bus, err := bf.open(ctx, fs, log, false)
	if err != nil {
		return runCommand.Errorf(stderr, exitError, "%v", err)
	}
	defer bus.Close()
	opened.Store(bus)
	workers, err := runWorkers(ctx, bus, specs, wc, m, log)
	sums := summaries(specs, workers)
	if *asJSON {
		cli.JSON(stdout, map[string]any{"sinks": sums, "ok": err == nil})
	} else {
		for _, s := range sums {
			fmt.Fprintf(stdout, "sink %s (%s): %d events applied, %d dead-lettered\n", s.Sink, s.Consumer, s.Applied, s.DeadLettered)
		}
	}
	if err != nil && !(errors.Is(err, context.Canceled) && !wc.UntilDrained) {
		return runCommand.Errorf(stderr, exitError, "%v", err)
	}
	return exitOK
}

// defaultUnavailable is how long `run --until-drained` waits for an
// unavailable JetStream cluster before it fails.
const defaultUnavailable = 5 * time.Minute

// unavailableTimeout is the stream's UnavailableTimeout for run: a
// service never exits for an unavailable cluster (it waits, not ready,
// until the cluster is back); a batch run waits up to the flag's time.
func unavailableTimeout(untilDrained bool, flag time.Duration) time.Duration {
	if !untilDrained || flag <= 0 {
		return -1
	}
	return flag
}

// given reports whether the flag name was set on fs's command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// sinkSummary is what one sink's worker did; applied and dead-lettered
// events are counted apart.
type sinkSummary struct {
	Sink         string `json:"sink"`
	Consumer     string `json:"consumer"`
	Sync         string `json:"sync,omitempty"` // a plain disk sink's sync= mode
	Applied      int64  `json:"applied"`
	DeadLettered int64  `json:"dead_lettered"`
}

func summaries(specs []*sink.Spec, workers []*replicate.Worker) []sinkSummary {
	out := []sinkSummary{}
	for i, w := range workers {
		st := w.Stats()
		// Stats.Applied counts every acked event, dead letters included.
		out = append(out, sinkSummary{Sink: specs[i].Raw, Consumer: w.Name(), Sync: specs[i].Sync(), Applied: st.Applied - st.DeadLettered, DeadLettered: st.DeadLettered})
	}
	return out
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
