package main

// writer snapshot and writer tail: flags around source/publish, which
// publishes a SpecStar Postgres deployment onto the stream.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/postgres"
	"github.com/specstar/replicator/source/publish"
	"github.com/specstar/replicator/stream"
)

// tailMetrics are writer tail's Prometheus series.
type tailMetrics struct {
	reg       *prometheus.Registry
	published prometheus.Counter
	restarts  prometheus.Counter
	lsn       prometheus.Gauge
	slotLag   prometheus.Gauge
	resnaps   prometheus.Counter
	streaming atomic.Bool
}

func newTailMetrics() *tailMetrics {
	m := &tailMetrics{
		reg:       prometheus.NewRegistry(),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "specstar_tail_events_published_total", Help: "Events published (and acknowledged) by writer tail."}),
		restarts:  prometheus.NewCounter(prometheus.CounterOpts{Name: "specstar_tail_restarts_total", Help: "Times the tail lost its source or stream and started again."}),
		lsn:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "specstar_tail_confirmed_lsn", Help: "Logical mode: the LSN confirmed to Postgres (everything before it is on the stream)."}),
		slotLag:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "specstar_tail_slot_retained_wal_bytes", Help: "Logical mode: WAL the replication slot keeps on the server."}),
		resnaps:   prometheus.NewCounter(prometheus.CounterOpts{Name: "specstar_tail_resnapshots_total", Help: "Logical mode: snapshots published again because the slot was past the stored position (the bus lost acknowledged events)."}),
	}
	m.reg.MustRegister(m.published, m.restarts, m.lsn, m.slotLag, m.resnaps, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// hooks reports the tail's progress to its meter and metrics.
func (m *tailMetrics) hooks(meter **progress.Meter) publish.Hooks {
	h := meterHooks(meter)
	h.Published, h.Streaming, h.Restarted = m.published.Inc, m.streaming.Store, m.restarts.Inc
	h.ConfirmedLSN = func(lsn pglogrepl.LSN) { m.lsn.Set(float64(lsn)) }
	h.SlotLag = func(n int64) { m.slotLag.Set(float64(n)) }
	h.Resnapshot = m.resnaps.Inc
	return h
}

// meterHooks reports progress to *meter once it is set.
func meterHooks(meter **progress.Meter) publish.Hooks {
	return publish.Hooks{Progress: func(events, bytes int64) {
		if *meter != nil {
			(*meter).Update(events, bytes)
		}
	}}
}

type pgFlags struct {
	src      sourceFlags
	cfg      stream.Config
	inflight int
	fs       *flag.FlagSet // to tell which stream settings were given
}

func (f *pgFlags) register(fs *flag.FlagSet, stderr io.Writer) {
	f.fs = fs
	f.src.register(fs, stderr)
	fs.StringVar(&f.cfg.URL, "nats", os.Getenv("NATS_URL"), "NATS server URL (default $NATS_URL; empty runs an embedded JetStream server)")
	fs.StringVar(&f.cfg.Stream, "stream", "SPECSTAR", "JetStream stream name")
	fs.StringVar(&f.cfg.SubjectPrefix, "subject-prefix", "specstar", "subject prefix of events")
	fs.StringVar(&f.cfg.DataDir, "data-dir", stream.DefaultDataDir(), "embedded server's data directory")
	f.cfg.RegisterSyncInterval(fs)
	f.cfg.Auth.Register(fs)
	fs.IntVar(&f.inflight, "max-inflight", 512, "published events awaiting their acknowledgement at most")
}

// openPG opens the deployment f names, the stream, and the publisher
// with its stored position; closeFn closes them.
func openPG(ctx context.Context, f *pgFlags, log *slog.Logger, hooks publish.Hooks) (p *publish.Postgres, bus *stream.Bus, closeFn func(), err error) {
	d, err := postgres.OpenDeployment(ctx, f.src.from, postgres.Stores{Resources: f.src.layers.Resources, Blobs: f.src.layers.Blobs})
	if err != nil {
		return nil, nil, nil, err
	}
	bus, err = stream.Open(ctx, givenIn(f.fs, f.cfg), log)
	if err != nil {
		d.Close()
		return nil, nil, nil, err
	}
	closeFn = func() { bus.Close(); d.Close() }
	if p, err = publish.OpenPostgres(ctx, d, bus, f.inflight, log, hooks); err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	return p, bus, closeFn, nil
}

var snapshotCmd = &cli.Command{
	Name:  "writer snapshot",
	Usage: "writer snapshot --from postgres://...|NAME [--from-resources s3://...] [--from-blobs s3://...|DIR] [--restart] [--nats URL] [--json]",
	Summary: `Publish the current state of a SpecStar deployment (metas, and
revisions from its resource tables or its S3 resource store, and the blobs
their payloads reference) from one consistent snapshot of its meta store;
an interrupted snapshot resumes where it stopped. With --from-resources
s3://... and no --from: every revision and blob of that S3 store.`,
	Examples: []string{
		"writer snapshot --from postgres://specstar@db/app --nats nats://nats:4222",
		"writer snapshot --from postgres://db/app --from-resources s3://bkt/{model}/data/ --json",
		"writer snapshot --config deploy.yaml --from primary",
	},
}

// snapshotResult is what snapshot prints with --json.
type snapshotResult struct {
	From       string   `json:"from"`
	Seconds    float64  `json:"seconds"`
	Models     []string `json:"models"`
	Metas      int      `json:"metas"`
	Revisions  int      `json:"revisions"`
	Duplicates int64    `json:"duplicates"`
	Skipped    bool     `json:"skipped,omitempty"` // a snapshot was already completed
}

func cmdSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := snapshotCmd.FlagSet(&verbose)
	var f pgFlags
	f.register(fs, stderr)
	restart := fs.Bool("restart", false, "take a new snapshot even if one was completed (the sinks are idempotent)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	pos, code, ok := snapshotCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return snapshotCmd.Usagef(stderr, "unexpected arguments %q", pos)
	}
	if code, done := snapshotAny(ctx, &f, fs, *asJSON, stdout, stderr, log); done {
		return code
	}
	if err := f.src.postgres(fs); err != nil {
		return snapshotCmd.Usagef(stderr, "%v", err)
	}
	if f.src.from == "" && f.src.layers.Resources != "" {
		return snapshotS3(ctx, &f, *asJSON, stdout, stderr, log)
	}
	var meter *progress.Meter
	p, _, closeFn, err := openPG(ctx, &f, log, meterHooks(&meter))
	if err != nil {
		return snapshotCmd.Errorf(stderr, exitError, "%v", err)
	}
	defer closeFn()
	if *restart {
		p.State = publish.PostgresState{}
	}
	if p.State.SnapshotDone && *asJSON {
		cli.JSON(stdout, snapshotResult{From: source.Redact(f.src.from), Models: []string{}, Skipped: true})
		return exitOK
	}
	if p.State.SnapshotDone {
		fmt.Fprintf(stdout, "a snapshot of %s was completed at %s; `writer tail` follows from it (use --restart for a new one)\n",
			source.Redact(f.src.from), p.State.Updated.Format(time.RFC3339))
		return exitOK
	}
	start := time.Now()
	meter = progress.New("snapshot "+source.Redact(f.src.from), 0, log)
	st, err := p.Snapshot(ctx)
	meter.Stop(err)
	if err != nil {
		return snapshotCmd.Errorf(stderr, exitError, "%v (the position is stored; run again to resume)", err)
	}
	if *asJSON {
		cli.JSON(stdout, snapshotResult{From: source.Redact(f.src.from), Seconds: time.Since(start).Seconds(), Models: st.Models,
			Metas: st.Metas, Revisions: st.Revisions, Duplicates: int64(p.Duplicates())})
		return exitOK
	}
	fmt.Fprintf(stdout, "snapshot of %s in %s: models %v, %d metas, %d revisions published (%d already on the stream)\n",
		source.Redact(f.src.from), time.Since(start).Round(time.Millisecond), st.Models, st.Metas, st.Revisions, p.Duplicates())
	return exitOK
}

// openPGWaiting is openPG for a service (writer tail): a source that
// refuses connections or cannot be reached yet (down, restarting, its
// address not resolvable yet in a starting cluster) is waited for with
// backoff and a warning per attempt, as a lost source is once the tail
// runs; anything else (a wrong password, a missing database, a bad URL)
// fails at once.
func openPGWaiting(ctx context.Context, f *pgFlags, log *slog.Logger, hooks publish.Hooks) (*publish.Postgres, *stream.Bus, func(), error) {
	bo := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(0), backoff.WithMaxInterval(30*time.Second))
	for attempt := 1; ; attempt++ {
		p, bus, closeFn, err := openPG(ctx, f, log, hooks)
		if err == nil || !postgres.IsUnreachable(err) || ctx.Err() != nil {
			return p, bus, closeFn, err
		}
		wait := bo.NextBackOff()
		log.Warn("Postgres not reachable; waiting for it", "attempt", attempt, "err", err, "retry_in", wait.Round(time.Millisecond).String())
		select {
		case <-ctx.Done():
			return nil, nil, nil, err
		case <-time.After(wait):
		}
	}
}
