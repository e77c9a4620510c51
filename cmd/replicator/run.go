package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	srcarchive "github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

func (c *workerConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&c.batch, "batch", 256, "events applied, made durable and acked together")
	fs.IntVar(&c.maxAckPending, "max-ack-pending", 4096, "unacknowledged events JetStream lets one sink hold")
	fs.DurationVar(&c.ackWait, "ack-wait", time.Minute, "redeliver an event not acked within this time")
	fs.IntVar(&c.parallel, "parallel", 16, "events of a batch applied at once")
	fs.BoolVar(&c.acceptGap, "accept-gap", false, "go on when the stream no longer holds events a sink never applied (retention removed them)")
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var bf busFlags
	bf.register(fs)
	var wc workerConfig
	wc.register(fs)
	var sa sinkArgs
	sa.register(fs, "sink (repeatable): disk:/path[?options], postgres://..., s3://bucket/prefix?endpoint=..., or a deployment of --config")
	fs.BoolVar(&wc.untilDrained, "until-drained", false, "exit 0 once every sink has applied everything the stream held at start")
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
	bus, err := stream.Open(ctx, bf.cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "replicator run: %v\n", err)
		return exitFailed
	}
	defer bus.Close()
	m := newMetrics()
	if err := m.serve(ctx, *listen, log); err != nil {
		fmt.Fprintf(stderr, "replicator run: listen %s: %v\n", *listen, err)
		return exitFailed
	}
	workers, err := runWorkers(ctx, bus, specs, wc, m, log)
	for _, w := range workers {
		fmt.Fprintf(stdout, "sink %s (%s): %d events applied, %d dead-lettered\n", w.spec.raw, w.spec.name, w.applied, w.dead)
	}
	if err != nil && !(errors.Is(err, context.Canceled) && !wc.untilDrained) {
		fmt.Fprintf(stderr, "replicator run: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// runWorkers runs one worker per sink, each on its own durable consumer,
// so a slow or failing sink never holds back another. It returns when all
// are done (until-drained) or ctx ends.
func runWorkers(ctx context.Context, bus *stream.Bus, specs []*sinkSpec, wc workerConfig, m *metrics, log *slog.Logger) ([]*worker, error) {
	workers := make([]*worker, 0, len(specs))
	for _, spec := range specs {
		sk, err := spec.open(ctx)
		if err != nil {
			for _, w := range workers {
				w.sink.Close()
			}
			return nil, err
		}
		workers = append(workers, &worker{spec: spec, sink: sk, bus: bus, cfg: wc, log: log, m: m})
	}
	var wg sync.WaitGroup
	errs := make([]error, len(workers))
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.run(ctx)
			if errs[i] != nil && !errors.Is(errs[i], context.Canceled) {
				log.Error("sink stopped", "sink", w.spec.name, "err", errs[i])
			}
		}()
	}
	wg.Wait()
	var all []error
	for i, w := range workers {
		if err := w.sink.Close(); err != nil {
			all = append(all, fmt.Errorf("close sink %s: %w", w.spec.raw, err))
		}
		if errs[i] != nil {
			all = append(all, fmt.Errorf("sink %s: %w", w.spec.raw, errs[i]))
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
	var wc workerConfig
	wc.register(fs)
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
		tmp, err := os.MkdirTemp("", "specstar-mirror-")
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
	wc.untilDrained = true
	workers, err := runWorkers(ctx, bus, []*sinkSpec{spec}, wc, newMetrics(), log)
	if err != nil {
		fmt.Fprintf(stderr, "replicator mirror: %v\n", err)
		return exitFailed
	}
	w := workers[0]
	fmt.Fprintf(stdout, "mirrored %s into %s in %s: %d metas, %d revisions, %d blobs (%d through the object store), %d events applied, %d dead-lettered\n",
		*from, spec.where(), time.Since(start).Round(time.Millisecond), rs.Metas, rs.Revisions, rs.Blobs, rs.LargeBlobs, w.applied, w.dead)
	for _, warn := range rs.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", warn.Error())
	}
	if w.dead > 0 {
		return exitFailed
	}
	return exitOK
}
