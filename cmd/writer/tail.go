package main

// writer tail: a snapshot, then every change of a Postgres or Redis
// deployment, published until interrupted.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/httpops"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/export"
	"github.com/specstar/replicator/source/postgres"
	"github.com/specstar/replicator/source/publish"
	"github.com/specstar/replicator/source/redis"
	"github.com/specstar/replicator/stream"
)

var tailCmd = &cli.Command{
	Name:  "writer tail",
	Usage: "writer tail --from postgres://...|s3://...?factory=s3|redis://...|NAME [--from-resources ...] [--from-blobs ...] [--mode auto|logical|poll] [--nats URL]",
	Summary: `Publish a snapshot if none was completed, then every change as it
happens until interrupted: by logical replication (a slot and a
publication, created if missing) where wal_level=logical and the user may
replicate, else by keyset polling. Positions are stored in the stream's
positions bucket. --drop-slot removes the slot and the publication.
An all-S3 factory is published whole, then its meta.db files are polled
every --interval: a changed file publishes its new or newer metas with
their new revisions and blobs, and a purge for each meta gone (no stored
position: a restart publishes everything again, which the stream
de-duplicates).
A Redis (or fast/slow, slow= in its URL) meta store is followed by
keyspace notifications and a rescan every --interval (default 5s); it
keeps no position, so each start publishes the snapshot again.`,
	Examples: []string{
		"writer tail --from postgres://specstar@db/app --nats nats://nats:4222",
		"writer tail --from postgres://db/app --mode poll --listen 127.0.0.1:9470",
		"writer tail --from postgres://db/app --drop-slot",
		"writer tail --from 's3://specstar/app/?factory=s3&region=eu-west-1' --interval 5s",
		"writer tail --from-meta 'redis://redis:6379/0?prefix={model}:' --from-resources disk:/srv/specstar",
	},
}

func cmdTail(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := tailCmd.FlagSet(&verbose)
	var f pgFlags
	f.register(fs, stderr)
	var o publish.TailOptions
	fs.StringVar(&o.Mode, "mode", publish.ModeAuto, "how to follow changes: logical (replication slot, pgoutput), poll (keyset polling on updated_time), or auto (logical where the server allows it, else poll)")
	fs.DurationVar(&o.Interval, "interval", postgres.DefaultPollInterval,
		fmt.Sprintf("Postgres poll mode and the all-S3 factory: the poll interval when nothing changed; Redis: the rescan period, %v unless given", redis.DefaultRescan))
	fs.DurationVar(&o.Overlap, "overlap", postgres.DefaultPollOverlap, "poll mode: re-read window for commits that become visible late")
	fs.DurationVar(&o.PurgeCheck, "purge-check", postgres.DefaultPurgeCheck, "poll mode: how often the meta tables' ids are listed to publish a purge for each deleted row (negative: never)")
	lo := &o.Logical
	fs.StringVar(&lo.Slot, "slot", "", "logical mode: replication slot name (default: specstar_replicator_DATABASE, one per database; or specstar_replicator where an earlier version made it in this database)")
	fs.StringVar(&lo.Publication, "publication", postgres.DefaultLogicalPublication, "logical mode: publication name")
	fs.DurationVar(&lo.Heartbeat, "heartbeat", postgres.DefaultLogicalHeartbeat, "logical mode: status update interval, so an idle slot does not pin WAL")
	dropSlot := fs.Bool("drop-slot", false, "drop the replication slot and publication (and forget the logical position), then exit")
	listen := fs.String("listen", "127.0.0.1:9465", "address for /metrics, /healthz and /readyz (empty: off)")
	pos, code, ok := tailCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return tailCmd.Usagef(stderr, "unexpected arguments %q", pos)
	}
	f.cfg.WaitForServer = !*dropSlot // a service waits for NATS, not ready meanwhile
	if code, done := tailFactory(ctx, &f, fs, o.Interval, stdout, stderr, log); done {
		return code
	}
	if code, done := tailRedis(ctx, &f, fs, *listen, o.Interval, stdout, stderr, log); done {
		return code
	}
	if err := f.src.postgres(fs); err != nil {
		return tailCmd.Usagef(stderr, "%v", err)
	}
	switch o.Mode {
	case publish.ModeAuto, publish.ModeLogical, publish.ModePoll:
	default:
		return tailCmd.Usagef(stderr, "--mode %q (want auto, logical or poll)", o.Mode)
	}
	var meter *progress.Meter
	m := newTailMetrics()
	var opened atomic.Pointer[stream.Bus]
	if !*dropSlot {
		if err := serveTail(ctx, *listen, m, &opened, log); err != nil {
			return tailCmd.Errorf(stderr, exitError, "%v", err)
		}
	}
	openSource := openPGWaiting // a service waits for its source
	if *dropSlot {
		openSource = openPG
	}
	p, bus, closeFn, err := openSource(ctx, &f, log, m.hooks(&meter))
	if err != nil {
		return tailCmd.Fail(stderr, tailCode(err), "", err)
	}
	defer closeFn()
	opened.Store(bus)
	if *dropSlot {
		slot, err := p.DropSlot(ctx, *lo)
		if err != nil {
			return tailCmd.Fail(stderr, tailCode(err), "", err)
		}
		fmt.Fprintf(stdout, "dropped slot %s and publication %s\n", slot, lo.Publication)
		return exitOK
	}
	meter = progress.New("tail "+source.Redact(f.src.from), 0, log)
	defer meter.Done()
	mode, err := p.Tail(ctx, o)
	if err != nil && !errors.Is(err, context.Canceled) {
		return tailCmd.Fail(stderr, tailCode(err), "", err)
	}
	fmt.Fprintf(stdout, "tail of %s (%s) stopped: %d events published\n", source.Redact(f.src.from), mode, p.Events())
	return exitOK
}

// tailCode is the exit status of a tail that stopped on err: 1 for a
// condition of the deployment no wait changes (postgres.IsPermanent:
// wal_level not logical, no REPLICATION attribute, no meta table), as the
// README's table says for input that is not valid; 2 otherwise.
func tailCode(err error) int {
	if postgres.IsPermanent(err) {
		return exitDiffer
	}
	return exitError
}

// tailRedis is writer tail of a deployment whose meta store is Redis;
// done is false for any other, which cmdTail follows as a Postgres one.
// interval is the rescan period when --interval was given.
func tailRedis(ctx context.Context, f *pgFlags, fs *flag.FlagSet, listen string, interval time.Duration, stdout, stderr io.Writer, log *slog.Logger) (code int, done bool) {
	cfg, err := f.src.config(fs)
	if err != nil {
		return tailCmd.Usagef(stderr, "%v", err), true
	}
	spec, err := deployment.SourceSpec(cfg, f.src.from, f.src.layers, source.Spec{})
	if err != nil || deployment.Scheme(spec.From) != "redis" {
		return 0, false // let the Postgres path say what is wrong
	}
	src, err := source.Open(spec)
	if err != nil {
		return tailCmd.Usagef(stderr, "%v", err), true
	}
	rs, ok := src.(*redis.Source)
	if !ok {
		return tailCmd.Errorf(stderr, exitError, "%s: not a Redis source", spec.Name), true
	}
	o := redis.FollowOptions{Log: log}
	if given(fs, "interval") {
		o.Rescan = interval
	}
	var blobs export.BlobOpener
	if stores := spec.Blobs; strings.HasPrefix(stores, "s3://") {
		b, closeBlobs, err := export.OpenBlobs(ctx, spec)
		if err != nil {
			return tailCmd.Errorf(stderr, exitError, "%v", err), true
		}
		defer closeBlobs()
		blobs = b
	}
	var meter *progress.Meter
	m := newTailMetrics()
	var opened atomic.Pointer[stream.Bus]
	if err := serveTail(ctx, listen, m, &opened, log); err != nil {
		return tailCmd.Errorf(stderr, exitError, "%v", err), true
	}
	bus, err := stream.Open(ctx, givenIn(fs, f.cfg), log)
	if err != nil {
		return tailCmd.Errorf(stderr, exitError, "%v", err), true
	}
	defer bus.Close()
	opened.Store(bus)
	pub := publish.NewPublisher(bus, f.inflight, blobs, log, m.hooks(&meter))
	meter = progress.New("tail "+spec.Name, 0, log)
	defer meter.Done()
	if err := pub.TailRedis(ctx, rs, o); err != nil && !errors.Is(err, context.Canceled) {
		return tailCmd.Errorf(stderr, exitError, "%s: %v", spec.Name, err), true
	}
	fmt.Fprintf(stdout, "tail of %s (redis) stopped: %d events published\n", spec.Name, pub.Events())
	return exitOK, true
}

// serveTail serves m on listen before the stream is opened, so that
// /healthz answers while NATS is awaited and /readyz says not ready
// until bus holds a connected stream and the tail is streaming.
func serveTail(ctx context.Context, listen string, m *tailMetrics, bus *atomic.Pointer[stream.Bus], log *slog.Logger) error {
	connected := func() bool { b := bus.Load(); return b != nil && b.Connected() }
	if err := httpops.Register(m.reg, connected); err != nil {
		return err
	}
	if err := httpops.Serve(ctx, listen, m.reg, func() bool { return m.streaming.Load() && connected() }, log); err != nil {
		return fmt.Errorf("--listen %s: %w (give each process its own --listen ADDR, or --listen '' for none)", listen, err)
	}
	return nil
}

// given reports whether flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
