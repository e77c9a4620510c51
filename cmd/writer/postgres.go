package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/httpops"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/postgres"
	"github.com/specstar/replicator/stream"
)

// pgState is what a Postgres publisher keeps in the positions bucket.
type pgState struct {
	Snapshot     postgres.Position `json:"snapshot"`              // progress of the snapshot
	SnapshotDone bool              `json:"snapshot_done"`         // the whole snapshot is on the stream
	Cursor       *postgres.Cursor  `json:"cursor,omitempty"`      // where the tail continues
	Updated      time.Time         `json:"updated,omitzero"`      // when this was saved
	TxSnapshot   string            `json:"tx_snapshot,omitempty"` // the snapshot's pg_current_snapshot()
	LSN          string            `json:"lsn,omitempty"`         // logical mode: everything up to here is on the stream
}

// tailMetrics are writer tail's Prometheus series.
type tailMetrics struct {
	reg       *prometheus.Registry
	published prometheus.Counter
	restarts  prometheus.Counter
	lsn       prometheus.Gauge
	slotLag   prometheus.Gauge
	streaming atomic.Bool
}

func newTailMetrics() *tailMetrics {
	m := &tailMetrics{
		reg:       prometheus.NewRegistry(),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "specstar_tail_events_published_total", Help: "Events published (and acknowledged) by writer tail."}),
		restarts:  prometheus.NewCounter(prometheus.CounterOpts{Name: "specstar_tail_restarts_total", Help: "Times the tail lost its source or stream and started again."}),
		lsn:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "specstar_tail_confirmed_lsn", Help: "Logical mode: the LSN confirmed to Postgres (everything before it is on the stream)."}),
		slotLag:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "specstar_tail_slot_retained_wal_bytes", Help: "Logical mode: WAL the replication slot keeps on the server."}),
	}
	m.reg.MustRegister(m.published, m.restarts, m.lsn, m.slotLag, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// pgPublisher couples a Postgres source with the stream and the stored
// position of that source.
type pgPublisher struct {
	src    *postgres.Source // nil when publishing an S3 store alone
	dep    *liveDeployment  // what src reads, closed with the publisher
	bus    *stream.Bus
	pub    *stream.Publisher
	kv     jetstream.KeyValue
	key    string
	state  pgState
	meter  *progress.Meter
	log    *slog.Logger
	m      *tailMetrics // nil outside tail
	blobs  blobOpener   // the deployment's blob store; nil: blobs are not published
	sent   map[string]bool
	events int64
	bytes  int64
}

// blobOpener reads a deployment's blob store (sink.DiskBlobStore or
// sink.S3).
type blobOpener interface {
	OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error)
}

// maxSentBlobs bounds the memory of blob ids already published this run;
// forgetting them only costs re-reading a blob the stream de-duplicates.
const maxSentBlobs = 100_000

// publishBlobs publishes the blobs a revision's payload references, once
// per run: small ones inline as BlobRecords, large ones through the object
// store (streamed, never held whole) with a BlobRefRecord.
func (p *pgPublisher) publishBlobs(ctx context.Context, model string, rec *events.RevisionRecord) error {
	res, err := rec.Resource()
	if err != nil {
		return err
	}
	refs, err := events.PayloadBinaryRefs(res.RawData)
	if err != nil {
		p.log.Warn("payload does not decode; its blobs are not looked for", "revision_id", res.Info.RevisionID, "err", err)
		return nil
	}
	for _, ref := range refs {
		if p.sent[ref.FileID] {
			continue
		}
		if err := p.publishBlob(ctx, model, ref); err != nil {
			return fmt.Errorf("blob %s of %s: %w", ref.FileID, res.Info.RevisionID, err)
		}
		if len(p.sent) >= maxSentBlobs {
			clear(p.sent)
		}
		p.sent[ref.FileID] = true
	}
	return nil
}

func (p *pgPublisher) publishBlob(ctx context.Context, model string, ref events.BinaryRef) error {
	bin, r, err := p.blobs.OpenBlob(ctx, ref.FileID)
	if errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("a payload references a blob that the blob store does not hold", "file_id", ref.FileID)
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	bin.ContentType = events.Some(contentType(p.blobs, bin, ref))
	return p.publishBlobData(ctx, model, ref.FileID, bin, r)
}

// publishBlobData publishes one blob read from r: inline as a BlobRecord
// when it fits in a message, else streamed into the object store (never
// held whole) with a BlobRefRecord.
func (p *pgPublisher) publishBlobData(ctx context.Context, model, fileID string, bin *events.Binary, r io.Reader) error {
	if !bin.Size.IsSet() {
		return fmt.Errorf("the blob store does not say the size of blob %s", fileID)
	}
	size, ct := bin.Size.Value, bin.ContentType.Value
	pub := p.pub
	if pub.FitsInline(int(size) + 256) {
		data, err := io.ReadAll(io.LimitReader(r, size+1))
		if err != nil {
			return err
		}
		return p.publish(ctx, model, &events.BlobRecord{FileID: fileID, BlobData: data, Size: int64(len(data)), ContentType: ct})
	}
	if err := pub.PutBlobStream(ctx, fileID, size, r); err != nil {
		return err
	}
	return p.publish(ctx, model, &events.BlobRefRecord{FileID: fileID, Size: size, ContentType: ct, Bucket: p.bus.BlobBucket()})
}

// contentType is a blob's content type: the blob store's, except for S3,
// whose objects carry it as S3's Content-Type, filled with a default
// (application/octet-stream) where SpecStar gave none; there the payload's
// reference is SpecStar's own record of it.
func contentType(store blobOpener, bin *events.Binary, ref events.BinaryRef) string {
	if _, ok := store.(*sink.S3); ok {
		return ref.ContentType
	}
	return bin.ContentType.Value
}

type pgFlags struct {
	from     string
	stores   storeFlags
	config   configFlag
	cfg      stream.Config
	inflight int
}

func (f *pgFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.from, "from", "", "the deployment's Postgres: postgres://user@host/db?table_prefix=&meta_table={model}_meta&encoding=msgpack&revisions=true&models=a,b")
	f.stores.register(fs)
	f.config.register(fs)
	fs.StringVar(&f.cfg.URL, "nats", os.Getenv("NATS_URL"), "NATS server URL (default $NATS_URL; empty runs an embedded JetStream server)")
	fs.StringVar(&f.cfg.Stream, "stream", "SPECSTAR", "JetStream stream name")
	fs.StringVar(&f.cfg.SubjectPrefix, "subject-prefix", "specstar", "subject prefix of events")
	fs.StringVar(&f.cfg.DataDir, "data-dir", stream.DefaultDataDir(), "embedded server's data directory")
	fs.IntVar(&f.inflight, "max-inflight", 512, "published events awaiting their acknowledgement at most")
}

func openPG(ctx context.Context, f *pgFlags, log *slog.Logger) (*pgPublisher, error) {
	d, err := openDeployment(ctx, f.from, f.stores)
	if err != nil {
		return nil, err
	}
	bus, err := stream.Open(ctx, f.cfg, log)
	if err != nil {
		d.close()
		return nil, err
	}
	kv, err := bus.Positions(ctx)
	if err != nil {
		bus.Close()
		d.close()
		return nil, err
	}
	h := xxh3.HashString128(postgres.ID(d.dsn, d.opts)).Bytes()
	p := &pgPublisher{src: d.src, dep: d, bus: bus, pub: bus.NewPublisher(f.inflight), kv: kv, key: fmt.Sprintf("pg-%x", h[:8]),
		log: log, sent: map[string]bool{}, blobs: d.blobs}
	if e, err := kv.Get(ctx, p.key); err == nil {
		if err := json.Unmarshal(e.Value(), &p.state); err != nil {
			p.close()
			return nil, fmt.Errorf("stored position %s: %w", p.key, err)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		p.close()
		return nil, fmt.Errorf("stored position %s: %w", p.key, err)
	}
	return p, nil
}

func (p *pgPublisher) close() {
	p.bus.Close()
	if p.dep != nil {
		p.dep.close()
	}
}

func (p *pgPublisher) publish(ctx context.Context, model string, rec events.Record) error {
	env, err := events.EnvelopeFor(p.bus.Prefix(), model, rec, nil)
	if err != nil {
		return err
	}
	if err := p.pub.Publish(ctx, env); err != nil {
		return err
	}
	p.events++
	p.bytes += int64(len(env.Payload))
	if p.m != nil {
		p.m.published.Inc()
	}
	if rr, ok := rec.(*events.RevisionRecord); ok && p.blobs != nil {
		return p.publishBlobs(ctx, model, rr)
	}
	if p.meter != nil {
		p.meter.Update(p.events, p.bytes)
	}
	return nil
}

// save waits for every event published so far to be acknowledged, then
// stores the position: the stored position never runs ahead of the
// stream.
func (p *pgPublisher) save(ctx context.Context) error {
	if err := p.pub.Flush(ctx); err != nil {
		return err
	}
	p.state.Updated = time.Now().UTC()
	b, err := json.Marshal(p.state)
	if err != nil {
		return err
	}
	if _, err := p.kv.Put(ctx, p.key, b); err != nil {
		return fmt.Errorf("store position %s: %w", p.key, err)
	}
	return nil
}

// snapshot publishes the deployment's current state, resuming a snapshot
// that was interrupted.
func (p *pgPublisher) snapshot(ctx context.Context) (postgres.SnapshotStats, error) {
	if p.state.Snapshot.Model != "" {
		p.log.Info("resuming the snapshot", "after_model", p.state.Snapshot.Model, "after_resource", p.state.Snapshot.ResourceID)
	}
	last := time.Now()
	st, err := p.src.Snapshot(ctx, p.state.Snapshot, func(model string, rec events.Record, pos postgres.Position) error {
		if err := p.publish(ctx, model, rec); err != nil {
			return err
		}
		p.state.Snapshot = pos
		if time.Since(last) > time.Second {
			last = time.Now()
			return p.save(ctx)
		}
		return nil
	})
	if err != nil {
		// Keep what was published: the next run resumes after it.
		if serr := p.save(context.WithoutCancel(ctx)); serr != nil {
			p.log.Warn("could not store the snapshot position", "err", serr)
		}
		return st, err
	}
	cur := st.Cursor.Clone()
	p.state = pgState{Snapshot: st.End, SnapshotDone: true, Cursor: &cur, TxSnapshot: st.TxSnapshot}
	return st, p.save(ctx)
}

func cmdSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	var f pgFlags
	f.register(fs)
	restart := fs.Bool("restart", false, "take a new snapshot even if one was completed (the sinks are idempotent)")
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return exitUsage
	}
	if err := f.config.resolve(fs, &f.from, &f.stores); err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
		return exitUsage
	}
	if f.from == "" && f.stores.resources != "" {
		return snapshotS3(ctx, &f, stdout, stderr, log)
	}
	p, err := openPG(ctx, &f, log)
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v\n", err)
		return exitInvalid
	}
	defer p.close()
	if *restart {
		p.state = pgState{}
	}
	if p.state.SnapshotDone {
		fmt.Fprintf(stdout, "a snapshot of %s was completed at %s; `writer tail` follows from it (use --restart for a new one)\n",
			source.Redact(f.from), p.state.Updated.Format(time.RFC3339))
		return exitOK
	}
	start := time.Now()
	p.meter = progress.New("snapshot "+source.Redact(f.from), 0, log)
	st, err := p.snapshot(ctx)
	p.meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "writer snapshot: %v (the position is stored; run again to resume)\n", err)
		return exitInvalid
	}
	fmt.Fprintf(stdout, "snapshot of %s in %s: models %v, %d metas, %d revisions published (%d already on the stream)\n",
		source.Redact(f.from), time.Since(start).Round(time.Millisecond), st.Models, st.Metas, st.Revisions, p.pub.Stats.Duplicates)
	return exitOK
}

func cmdTail(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	var f pgFlags
	f.register(fs)
	mode := fs.String("mode", "auto", "how to follow changes: logical (replication slot, pgoutput), poll (keyset polling on updated_time), or auto (logical where the server allows it, else poll)")
	interval := fs.Duration("interval", postgres.DefaultPollInterval, "poll mode: poll interval when nothing changed")
	overlap := fs.Duration("overlap", postgres.DefaultPollOverlap, "poll mode: re-read window for commits that become visible late")
	var lo postgres.LogicalOptions
	fs.StringVar(&lo.Slot, "slot", postgres.DefaultLogicalSlot, "logical mode: replication slot name")
	fs.StringVar(&lo.Publication, "publication", postgres.DefaultLogicalPublication, "logical mode: publication name")
	fs.DurationVar(&lo.Heartbeat, "heartbeat", postgres.DefaultLogicalHeartbeat, "logical mode: status update interval, so an idle slot does not pin WAL")
	dropSlot := fs.Bool("drop-slot", false, "drop the replication slot and publication (and forget the logical position), then exit")
	listen := fs.String("listen", "127.0.0.1:9465", "address for /metrics, /healthz and /readyz (empty: off)")
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return exitUsage
	}
	if err := f.config.resolve(fs, &f.from, &f.stores); err != nil {
		fmt.Fprintf(stderr, "writer tail: %v\n", err)
		return exitUsage
	}
	switch *mode {
	case "auto", "logical", "poll":
	default:
		fmt.Fprintf(stderr, "writer tail: --mode %q (want auto, logical or poll)\n", *mode)
		return exitUsage
	}
	p, err := openPG(ctx, &f, log)
	if err != nil {
		fmt.Fprintf(stderr, "writer tail: %v\n", err)
		return exitInvalid
	}
	defer p.close()
	dsn, _, _ := postgres.ParseURL(f.from)
	if *dropSlot {
		if err := postgres.DropLogical(ctx, dsn, lo); err != nil {
			fmt.Fprintf(stderr, "writer tail: %v\n", err)
			return exitInvalid
		}
		p.state.LSN = ""
		if err := p.save(ctx); err != nil {
			fmt.Fprintf(stderr, "writer tail: %v\n", err)
			return exitInvalid
		}
		fmt.Fprintf(stdout, "dropped slot %s and publication %s\n", lo.Slot, lo.Publication)
		return exitOK
	}
	if *mode == "auto" {
		why, ok := logicalAvailable(ctx, dsn)
		if ok {
			*mode = "logical"
		} else {
			*mode = "poll"
			log.Info("following changes by polling instead of logical replication", "why", why)
		}
	}
	p.meter = progress.New("tail "+source.Redact(f.from), 0, log)
	defer p.meter.Done()
	p.m = newTailMetrics()
	if err := httpops.Serve(ctx, *listen, p.m.reg, p.m.streaming.Load, log); err != nil {
		fmt.Fprintf(stderr, "writer tail: listen %s: %v\n", *listen, err)
		return exitInvalid
	}
	// A tail is a service: losing Postgres (a restart, a failover) or the
	// stream is waited out with backoff, resuming from the stored position.
	bo := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(0), backoff.WithMaxInterval(30*time.Second))
	for {
		// Each attempt resumes from the stored position: revisions emitted
		// after it may not have reached the stream, so none is skipped as
		// already emitted.
		p.src.ForgetEmitted()
		started := time.Now()
		p.m.streaming.Store(true)
		if *mode == "logical" {
			err = p.tailLogical(ctx, dsn, lo)
		} else {
			err = p.tailPoll(ctx, *interval, *overlap)
		}
		p.m.streaming.Store(false)
		if ctx.Err() != nil {
			break
		}
		if serr := p.save(context.WithoutCancel(ctx)); serr != nil {
			log.Warn("could not store the position", "err", serr)
		}
		if time.Since(started) > time.Minute {
			bo.Reset() // it ran well for a while: this is a new failure, not the same one
		}
		wait := bo.NextBackOff()
		p.m.restarts.Inc()
		log.Warn("tail stopped; starting again", "in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if ctx.Err() != nil {
			break
		}
	}
	if serr := p.save(context.WithoutCancel(ctx)); serr != nil {
		fmt.Fprintf(stderr, "writer tail: store position: %v\n", serr)
		return exitInvalid
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "writer tail: %v\n", err)
		return exitInvalid
	}
	fmt.Fprintf(stdout, "tail of %s (%s) stopped: %d events published\n", source.Redact(f.from), *mode, p.events)
	return exitOK
}

// logicalAvailable says whether the server can stream logical changes to
// this user, and if not, why.
func logicalAvailable(ctx context.Context, dsn string) (string, bool) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Sprintf("cannot check the server: %v", err), false
	}
	defer conn.Close(ctx)
	var level string
	var allowed bool
	if err := conn.QueryRow(ctx, "SELECT current_setting('wal_level'), (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)").Scan(&level, &allowed); err != nil {
		return fmt.Sprintf("cannot check the server: %v", err), false
	}
	if level != "logical" {
		return fmt.Sprintf("the server runs wal_level=%s, and logical replication needs wal_level=logical", level), false
	}
	if !allowed {
		return "the user has no REPLICATION attribute", false
	}
	return "", true
}

func (p *pgPublisher) tailPoll(ctx context.Context, interval, overlap time.Duration) error {
	if !p.state.SnapshotDone {
		p.log.Info("no completed snapshot of this source: taking one first")
		if _, err := p.snapshot(ctx); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	p.log.Info("following changes by polling", "interval", interval.String(), "overlap", overlap.String())
	last := time.Now()
	return p.src.Poll(ctx, *p.state.Cursor, interval, overlap, func(model string, rec events.Record, cur postgres.Cursor) error {
		if err := p.publish(ctx, model, rec); err != nil {
			return err
		}
		c := cur.Clone()
		p.state.Cursor = &c
		if time.Since(last) > time.Second {
			last = time.Now()
			return p.save(ctx)
		}
		return nil
	})
}

// tailLogical follows the replication slot. The snapshot, when one is
// needed, is read at the slot's exported snapshot, so nothing between the
// two is missed; an LSN is confirmed to Postgres only once every event up
// to it is acknowledged by JetStream, and stored for the next run.
func (p *pgPublisher) tailLogical(ctx context.Context, dsn string, o postgres.LogicalOptions) error {
	start, err := p.src.SetupLogical(ctx, dsn, o)
	if err != nil {
		return err
	}
	startLSN := start.LSN
	switch {
	case start.Created:
		// A new slot: the stream starts after its snapshot, which must be
		// published whole (a snapshot taken before the slot existed could
		// miss what changed in between).
		p.log.Info("created replication slot; publishing the snapshot it exported", "slot", start.Slot, "lsn", start.LSN.String())
		p.state = pgState{}
		st, err := p.src.SnapshotAt(ctx, start.SnapshotName, postgres.Position{}, func(model string, rec events.Record, pos postgres.Position) error {
			return p.publish(ctx, model, rec)
		})
		start.Close()
		if err != nil {
			return fmt.Errorf("snapshot at the slot's start: %w", err)
		}
		cur := st.Cursor.Clone()
		p.state = pgState{Snapshot: st.End, SnapshotDone: true, Cursor: &cur, TxSnapshot: st.TxSnapshot, LSN: start.LSN.String()}
		if err := p.save(ctx); err != nil {
			return err
		}
	default:
		start.Close()
		if !p.state.SnapshotDone {
			// The slot exists but no snapshot was completed: read one now
			// and replay the slot from its position (the overlap is re-sent
			// and the sinks make it a no-op).
			p.log.Info("replication slot exists but no snapshot was completed: taking one", "slot", start.Slot)
			if _, err := p.snapshot(ctx); err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
		}
		if stored, err := pglogrepl.ParseLSN(p.state.LSN); err == nil && stored > startLSN {
			startLSN = stored
		}
	}
	var confirmed atomic.Uint64
	confirmed.Store(uint64(startLSN))
	lastSave, lastLag := time.Now(), time.Time{}
	p.log.Info("following changes by logical replication", "slot", o.Slot, "from_lsn", startLSN.String())
	return p.src.StreamLogical(ctx, dsn, o, startLSN, postgres.LogicalHandler{
		Record: func(model string, rec events.Record, _ pglogrepl.LSN) error {
			return p.publish(ctx, model, rec)
		},
		Purge: func(model, resourceID string, _ pglogrepl.LSN, committed time.Time) error {
			// The delete's commit time: a re-creation is newer than it.
			return p.publish(ctx, model, &events.PurgeRecord{ResourceID: resourceID, PurgedTime: events.Time{Time: committed.UTC()}})
		},
		Commit: func(lsn pglogrepl.LSN) error {
			if err := p.pub.Flush(ctx); err != nil {
				return err
			}
			confirmed.Store(uint64(lsn))
			p.state.LSN = lsn.String()
			p.m.lsn.Set(float64(lsn))
			if time.Since(lastSave) > time.Second {
				lastSave = time.Now()
				if err := p.save(ctx); err != nil {
					return err
				}
			}
			if time.Since(lastLag) > 15*time.Second {
				lastLag = time.Now()
				if lag, err := postgres.SlotLag(ctx, dsn, o); err == nil {
					p.m.slotLag.Set(float64(lag))
					p.log.Info("replication slot", "slot", o.Slot, "retained_wal_bytes", lag, "confirmed_lsn", lsn.String())
				}
			}
			return nil
		},
		Confirmed: func() pglogrepl.LSN { return pglogrepl.LSN(confirmed.Load()) },
	})
}
