package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/testsupport/fsprobe"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/stream"
)

// The live tail under load (BenchmarkTailLoad). Each knob is an
// environment variable so the one-minute runs need no edit:
// BENCH_TAIL_FOR (the measured duration, default 15 s), BENCH_TAIL_RESOURCES
// (resources updated, default 20), BENCH_TAIL_CONNS (writer connections,
// default 10), BENCH_TAIL_POLL (how often the sink is looked at, default
// 2 ms), BENCH_TAIL_SAMPLE (writes watched a second, default 500),
// BENCH_TAIL_DISK_OPTS (appended to the disk sink's directory: ?sync=...),
// BENCH_TAIL_DISK_DIR (where the disk sink's directory is made, default
// the test's temporary directory) and BENCH_TAIL_PROFILE (a directory: the
// tail and the replicator write their CPU profiles there,
// tail-<run>.pprof and replicator-<run>.pprof).
var (
	loadFor       = envDuration("BENCH_TAIL_FOR", 15*time.Second)
	loadResources = envInt("BENCH_TAIL_RESOURCES", 20)
	loadConns     = envInt("BENCH_TAIL_CONNS", 10)
	loadPoll      = envDuration("BENCH_TAIL_POLL", 2*time.Millisecond)
	loadSample    = envInt("BENCH_TAIL_SAMPLE", 500)
	loadProfile   = os.Getenv("BENCH_TAIL_PROFILE")
)

// loadDrain bounds how long the sink may take to show the last watched
// write after the load stops.
const loadDrain = 5 * time.Minute

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// loadAvg is the machine's 1-minute load average (0 when unknown): the
// machine is shared, and a lag means little without it.
func loadAvg() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	return f
}

// sinkCounter reads, for a batch of resources, the total_revision_count
// of their metas in a sink (absent: 0).
type sinkCounter func(ctx context.Context, rids []string) (map[string]int64, error)

func diskCounter(dir string) sinkCounter {
	return func(_ context.Context, rids []string) (map[string]int64, error) {
		out := make(map[string]int64, len(rids))
		for _, rid := range rids {
			out[rid] = lagSinkCount(dir, rid)
		}
		return out, nil
	}
}

// pgCounter reads the sink's meta table (msgpack, SpecStar's factory
// naming) with one query per look.
func pgCounter(conn *pgx.Conn) sinkCounter {
	return func(ctx context.Context, rids []string) (map[string]int64, error) {
		out := make(map[string]int64, len(rids))
		rows, err := conn.Query(ctx, `SELECT resource_id, data FROM `+pgx.Identifier{lagModel + "_meta"}.Sanitize()+
			` WHERE resource_id = ANY($1)`, rids)
		if err != nil {
			if strings.Contains(err.Error(), "does not exist") {
				return out, nil // the sink has not created its table yet
			}
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var rid string
			var data []byte
			if err := rows.Scan(&rid, &data); err != nil {
				return nil, err
			}
			m, err := events.DecodeResourceMeta(events.Msgpack, data)
			if err != nil {
				return nil, fmt.Errorf("sink meta %s: %w", rid, err)
			}
			out[rid] = m.TotalRevisionCount
		}
		return out, rows.Err()
	}
}

// streamCounter follows the metas the tail publishes (a core NATS
// subscription on the stream's meta subject, so it sees a message as it
// is published) and answers with the newest revision count seen: the
// lag to it is the tail's share of the lag to a sink.
func streamCounter(b *testing.B, bus *stream.Bus) sinkCounter {
	var mu sync.Mutex
	seen := map[string]int64{}
	sub, err := bus.NC.Subscribe(events.Subject(bus.Prefix(), lagModel, events.KindMeta), func(msg *nats.Msg) {
		rec, err := events.DecodeRecord(events.Msgpack, msg.Data)
		if err != nil {
			return
		}
		mr, ok := rec.(*events.MetaRecord)
		if !ok {
			return
		}
		m, err := mr.Meta()
		if err != nil {
			return
		}
		mu.Lock()
		seen[m.ResourceID] = max(seen[m.ResourceID], m.TotalRevisionCount)
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	b.Cleanup(func() { sub.Unsubscribe() })
	return func(_ context.Context, rids []string) (map[string]int64, error) {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]int64, len(rids))
		for _, rid := range rids {
			out[rid] = seen[rid]
		}
		return out, nil
	}
}

// watched is a write whose arrival in the sink is waited for.
type watched struct {
	rid string
	n   int64     // the resource's total_revision_count after the write
	at  time.Time // when the write's commit returned
}

// loadWatcher is one goroutine looking at the sink every loadPoll for
// every watched write not seen yet; a write's lag is the time from its
// commit to the first look that shows it (so it is overstated by up to
// one look's duration plus loadPoll, reported as look-ms).
type loadWatcher struct {
	in     chan watched
	done   chan struct{}
	lags   []time.Duration
	looks  int
	lookT  time.Duration
	err    error
	closed atomic.Bool
}

func startWatcher(ctx context.Context, count sinkCounter) *loadWatcher {
	l := &loadWatcher{in: make(chan watched, 1<<16), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		var pending []watched
		var deadline time.Time
		for {
			open := true
		drain:
			for {
				select {
				case w, ok := <-l.in:
					if !ok {
						open = false
						break drain
					}
					pending = append(pending, w)
				default:
					break drain
				}
			}
			if !open && deadline.IsZero() {
				deadline = time.Now().Add(loadDrain)
				l.in = nil
			}
			if len(pending) > 0 {
				var rids []string
				for _, w := range pending {
					if !slices.Contains(rids, w.rid) {
						rids = append(rids, w.rid)
					}
				}
				t0 := time.Now()
				have, err := count(ctx, rids)
				now := time.Now()
				l.looks++
				l.lookT += now.Sub(t0)
				if err != nil {
					l.err = err
					return
				}
				kept := pending[:0]
				for _, w := range pending {
					if have[w.rid] >= w.n {
						l.lags = append(l.lags, now.Sub(w.at))
					} else {
						kept = append(kept, w)
					}
				}
				pending = kept
			}
			if !deadline.IsZero() && len(pending) == 0 {
				return
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				l.err = fmt.Errorf("%d watched writes never reached the sink within %s of the load's end (%d did)", len(pending), loadDrain, len(l.lags))
				return
			}
			time.Sleep(loadPoll)
		}
	}()
	return l
}

// finish stops taking writes, waits for the watched ones and returns
// p50, p99 and max in ms and the mean look in ms.
func (l *loadWatcher) finish() (p50, p99, pmax, look float64, err error) {
	close(l.in)
	<-l.done
	if l.err != nil {
		return 0, 0, 0, 0, l.err
	}
	if len(l.lags) == 0 {
		return 0, 0, 0, 0, fmt.Errorf("no write was watched")
	}
	s := slices.Clone(l.lags)
	slices.Sort(s)
	at := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return float64(s[max(0, min(i, len(s)-1))]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.99), at(1), float64(l.lookT) / float64(l.looks) / float64(time.Millisecond), nil
}

// loadRun is what one measured run found.
type loadRun struct {
	writes                  int
	rate                    float64
	p50, p99, pmax, look    float64
	streamP50, streamP99    float64
	eventsPerWrite          float64
	loadBefore, loadAfter   float64
	historyStart, historyTo float64
	// CPU per write, in microseconds, from the load's start to the last
	// watched write in the sink: the writer tail process (the tail and the
	// embedded NATS server it hosts), the replicator process, the
	// Postgres cluster (all of it, and its walsender and client backends
	// apart) and this process (the load generator and the watchers).
	tailCPU, replCPU, pgCPU, walsenderCPU, backendCPU, selfCPU float64
	tailSys, replSys                                           float64 // the kernel's part
	// fsCreate is the system CPU per inode created where the disk sink
	// writes, probed just before the load (fsprobe): what the file system
	// charged at that moment.
	fsCreate float64
}

// BenchmarkTailLoad measures the live tail under SpecStar-shaped load
// (issue 14, goal 6): rate=1000 and rate=5000 updates a second for
// BENCH_TAIL_FOR (15 s by default; the figure is a minute), into
// a disk sink or a Postgres sink, on resources that already hold 10 or
// 1,000 revisions. Each update is what SpecStar does (specstarpg.Update:
// read the meta FOR UPDATE, insert the revision's resource_index and
// resource_data rows, upsert the meta, one transaction), paced per
// connection at rate/BENCH_TAIL_CONNS, each connection owning its own
// resources (SpecStar serializes the writes of one resource). The
// pipeline: a wal_level=logical throwaway cluster, the built `writer tail
// --mode logical` as a process hosting the embedded JetStream server, the
// built `replicator run` as a process into the sink (the Postgres sink is
// a second database of the same throwaway cluster). The replicator starts
// once the slot's snapshot is on the stream, which is then purged: the
// sink applies the load's events only (the history lives in the source,
// where it could slow the tail down). Up to
// BENCH_TAIL_SAMPLE writes a second are watched: one goroutine looks at
// the sink every BENCH_TAIL_POLL for all of them at once (a stat+read per
// resource on disk, one query on Postgres), and a write's lag runs from
// its commit returning to the first look showing its revision count.
// Reported: the rate achieved, p50/p99/max lag to the sink, p50/p99 lag
// to the stream (tail-p50-ms: commit to the tail publishing the meta,
// seen by a subscription on the meta subject), the events the tail
// published per write (2 = the meta and the new revision, whatever the
// history), the mean look time, the 1-minute load average before and
// after, and the CPU each process used per write (issue 22, goal 3), from
// /proc (utime+stime) at the load's start and once the last watched write
// is in the sink: tail+nats-cpu-us/write (the writer tail process, which
// hosts the NATS server), replicator-cpu-us/write, their sum
// pipeline-cpu-us/write, the kernel's part of the first two
// (tail+nats-sys-us/write, replicator-sys-us/write: a disk sink's file
// creations), postgres-cpu-us/write (the whole cluster: the
// load's own transactions, the walsender, a Postgres sink, the looks; its
// walsender and its client backends also apart) and loadgen-cpu-us/write
// (this process).
func BenchmarkTailLoad(b *testing.B) {
	repl := buildBinary(b, "../replicator")
	writer := buildBinary(b, ".")
	// The disk sinks' trees are kept until every sub-benchmark is done: on
	// ext4 without a journal, deleting one would make the next run's
	// inodes several times dearer for minutes (fsprobe).
	trees, err := os.MkdirTemp(os.Getenv("BENCH_TAIL_DISK_DIR"), "tailload-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(trees) })
	b.Logf("disk sinks under %s: %s", trees, fsprobe.Describe(trees))
	for _, rate := range []int{500, 1000, 5000} {
		for _, sink := range []string{"disk", "postgres"} {
			for _, history := range []int{10, 1000} {
				b.Run(fmt.Sprintf("rate=%d/sink=%s/history=%d", rate, sink, history), func(b *testing.B) {
					var r loadRun
					for b.Loop() {
						r = tailLoadRun(b, writer, repl, trees, rate, sink, history)
					}
					b.ReportMetric(float64(r.writes), "writes")
					b.ReportMetric(r.rate, "writes/s")
					b.ReportMetric(r.p50, "p50-ms")
					b.ReportMetric(r.p99, "p99-ms")
					b.ReportMetric(r.pmax, "max-ms")
					b.ReportMetric(r.streamP50, "tail-p50-ms")
					b.ReportMetric(r.streamP99, "tail-p99-ms")
					b.ReportMetric(r.look, "look-ms")
					b.ReportMetric(r.eventsPerWrite, "events/write")
					b.ReportMetric(r.historyStart, "revs-start")
					b.ReportMetric(r.historyTo, "revs-end")
					b.ReportMetric(r.loadBefore, "load1-before")
					b.ReportMetric(r.loadAfter, "load1-after")
					b.ReportMetric(loadFor.Seconds(), "run-s")
					b.ReportMetric(r.tailCPU, "tail+nats-cpu-us/write")
					b.ReportMetric(r.replCPU, "replicator-cpu-us/write")
					b.ReportMetric(r.tailCPU+r.replCPU, "pipeline-cpu-us/write")
					b.ReportMetric(r.tailSys, "tail+nats-sys-us/write")
					b.ReportMetric(r.replSys, "replicator-sys-us/write")
					b.ReportMetric(r.pgCPU, "postgres-cpu-us/write")
					b.ReportMetric(r.walsenderCPU, "pg-walsender-cpu-us/write")
					b.ReportMetric(r.backendCPU, "pg-backends-cpu-us/write")
					b.ReportMetric(r.selfCPU, "loadgen-cpu-us/write")
					if sink == "disk" {
						b.ReportMetric(r.fsCreate, "fs-create-sys-us/inode")
					}
				})
			}
		}
	}
}

func tailLoadRun(b *testing.B, writer, repl, trees string, rate int, sink string, history int) loadRun {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cluster := pgtest.StartLogical(b)
	prefix := "load_"
	w, err := specstarpg.Open(ctx, cluster.DSN+fmt.Sprintf("&pool_max_conns=%d", loadConns+2), specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if err := w.CreateModel(ctx, lagModel); err != nil {
		b.Fatal(err)
	}
	rids := make([]string, loadResources)
	for i := range rids {
		rids[i] = fmt.Sprintf("%s:%04d", lagModel, i)
	}
	// parallel runs f(conn, rid) for each resource, a goroutine per
	// connection, each owning the resources i%loadConns == conn.
	parallel := func(f func(conn int, rid string) error) {
		var wg sync.WaitGroup
		errs := make(chan error, loadConns)
		for c := range loadConns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; i < len(rids); i += loadConns {
					if err := f(c, rids[i]); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	// The history: a create and history-1 updates per resource, small
	// payloads (the history's size is not what is measured, its length is).
	small := func(rid string, n int) events.Value {
		return events.Struct{Declared: 2, Fields: []events.StructField{{Name: "title", Value: rid}, {Name: "n", Value: int64(n)}}}
	}
	parallel(func(_ int, rid string) error {
		if _, err := w.Create(ctx, lagModel, rid, small(rid, 0), specstarpg.Write{}); err != nil {
			return err
		}
		for n := 1; n < history; n++ {
			if _, err := w.Update(ctx, lagModel, rid, small(rid, n), specstarpg.Write{}); err != nil {
				return err
			}
		}
		return nil
	})

	// The sink.
	var sinkURL, sinkDir string
	var count sinkCounter
	switch sink {
	case "disk":
		// Under BENCH_TAIL_DISK_DIR when set: another file system
		// (/dev/shm: what the sink costs where creating a file costs the
		// kernel little).
		dir, err := os.MkdirTemp(trees, "sink-")
		if err != nil {
			b.Fatal(err)
		}
		sinkDir = dir
		sinkURL, count = dir+os.Getenv("BENCH_TAIL_DISK_OPTS"), diskCounter(dir)
	case "postgres":
		admin, err := pgx.Connect(ctx, cluster.DSN)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := admin.Exec(ctx, `CREATE DATABASE sink`); err != nil {
			b.Fatal(err)
		}
		admin.Close(ctx)
		sinkDSN := strings.Replace(cluster.DSN, "/postgres?", "/sink?", 1)
		conn, err := pgx.Connect(ctx, sinkDSN)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		sinkURL, count = sinkDSN, pgCounter(conn)
	}

	// The pipeline: the tail as a process of its own hosting the embedded
	// server, so that its CPU is told from the load generator's; this
	// process and the replicator are its clients.
	runName := fmt.Sprintf("rate%d-%s-history%d", rate, sink, history)
	profileEnv := func(cmd string) []string {
		if loadProfile == "" {
			return os.Environ()
		}
		return append(os.Environ(), cli.CPUProfileEnv+"="+filepath.Join(loadProfile, cmd+"-"+runName+".pprof"))
	}
	dataDir := b.TempDir()
	tctx, stopTail := context.WithCancel(ctx)
	var tailOut lagBuffer
	tail := exec.CommandContext(tctx, writer, "tail", "--from", cluster.DSN+"&table_prefix="+prefix, "--mode", "logical",
		"--data-dir", dataDir, "--listen", "")
	tail.Cancel = func() error { return tail.Process.Signal(os.Interrupt) } // its exit line says what it published
	tail.WaitDelay = time.Minute
	tail.Stdout, tail.Stderr, tail.Env = &tailOut, &tailOut, profileEnv("tail")
	if err := tail.Start(); err != nil {
		b.Fatal(err)
	}
	stopped := false
	published := int64(-1) // events the tail published, from its exit line
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		stopTail()
		tail.Wait() // the context's error, once canceled: the exit status says how it ended
		if code := tail.ProcessState.ExitCode(); code != 0 {
			b.Errorf("writer tail: exit %d\n%s", code, lastBytes(tailOut.String(), 4000))
		}
		if m := regexp.MustCompile(`stopped: (\d+) events published`).FindStringSubmatch(tailOut.String()); m != nil {
			published, _ = strconv.ParseInt(m[1], 10, 64)
		}
	}
	defer stop()
	// Wait for the tail to record its server's URL, then connect to it
	// as the replicator does, a client of --nats URL (plain text, the
	// token in the URL), never a candidate to take the server over: this
	// process's subscription costs the server as little as it can.
	var natsURL string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		addr, aerr := os.ReadFile(filepath.Join(dataDir, "embedded.url"))
		token, terr := os.ReadFile(filepath.Join(dataDir, "embedded.token"))
		if aerr == nil && terr == nil {
			u, err := url.Parse(strings.TrimSpace(string(addr)))
			if err != nil {
				b.Fatalf("embedded.url: %v", err)
			}
			u.User = url.User(strings.TrimSpace(string(token)))
			natsURL = u.String()
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("writer tail started no embedded server in a minute:\n%s", lastBytes(tailOut.String(), 4000))
		}
	}
	bus, err := stream.Open(ctx, stream.Config{URL: natsURL}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	// The slot's snapshot (a meta and every revision per resource) is
	// published, then purged from the stream before the replicator starts:
	// the sink gets the load's events only, so a history of 1,000 costs
	// the disk sink no minutes of catching up, and what the history can
	// slow down is the tail's reading of the source.
	snapshot := int64(len(rids)) * int64(1+history)
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		info, err := bus.Stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if int64(info.State.Msgs) >= snapshot {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the slot's snapshot: %d of %d events on the stream after 5 minutes", info.State.Msgs, snapshot)
		}
	}
	time.Sleep(time.Second) // the tail is streaming from the slot now
	if err := bus.Stream.Purge(ctx); err != nil {
		b.Fatal(err)
	}
	rctx, stopRepl := context.WithCancel(ctx)
	var replOut lagBuffer
	cmd := exec.CommandContext(rctx, repl, "run", "--nats", natsURL, "--sink", sinkURL, "--listen", "")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) } // so that its profile is written
	cmd.WaitDelay = time.Minute
	cmd.Stdout, cmd.Stderr, cmd.Env = &replOut, &replOut, profileEnv("replicator")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	replStopped := false
	stopReplicator := func() {
		if !replStopped {
			replStopped = true
			stopRepl()
			cmd.Wait()
		}
	}
	defer stopReplicator()
	time.Sleep(time.Second) // the replicator's consumer is listening
	postmaster, err := cluster.PostmasterPID()
	if err != nil {
		b.Fatal(err)
	}

	// The load: connection c writes its j-th update at start +
	// (j*conns+c)/rate, at once when behind, until loadFor has passed, and
	// every sampleEvery-th write of the run is watched.
	watcher := startWatcher(ctx, count)
	onStream := startWatcher(ctx, streamCounter(b, bus))
	sampleEvery := max(1, rate/loadSample)
	var fsCreate time.Duration
	if sinkDir != "" {
		if fsCreate, _, err = fsprobe.Cost(trees, 500); err != nil {
			b.Fatal(err)
		}
	}
	loadBefore := loadAvg()
	cpuBefore, err := sampleCPU(tail.Process.Pid, cmd.Process.Pid, postmaster)
	if err != nil {
		b.Fatal(err)
	}
	var writes atomic.Int64
	var last atomic.Int64
	start := time.Now()
	parallelLoad := func(c int) error {
		var mine []string
		for i := c; i < len(rids); i += loadConns {
			mine = append(mine, rids[i])
		}
		if len(mine) == 0 {
			return nil
		}
		for j := 0; ; j++ {
			due := start.Add(time.Duration(float64(j*loadConns+c) * float64(time.Second) / float64(rate)))
			if due.Sub(start) >= loadFor || time.Since(start) >= loadFor {
				return nil // the run's time is up, written or not
			}
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			rid := mine[j%len(mine)]
			wr, err := w.Update(ctx, lagModel, rid, lagPayload(rid, j+1), specstarpg.Write{})
			at := time.Now()
			if err != nil {
				return fmt.Errorf("update %s: %w", rid, err)
			}
			last.Store(at.UnixNano())
			if n := writes.Add(1); n%int64(sampleEvery) == 0 {
				watcher.in <- watched{rid: rid, n: wr.Meta.TotalRevisionCount, at: at}
				onStream.in <- watched{rid: rid, n: wr.Meta.TotalRevisionCount, at: at}
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, loadConns)
	for c := range loadConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := parallelLoad(c); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	n := writes.Load()
	elapsed := time.Unix(0, last.Load()).Sub(start)
	sp50, sp99, _, _, serr := onStream.finish()
	p50, p99, pmax, look, err := watcher.finish()
	loadAfter := loadAvg()
	if err != nil {
		b.Fatalf("%v\nreplicator:\n%s", err, lastBytes(replOut.String(), 4000))
	}
	if serr != nil {
		b.Fatalf("on the stream: %v", serr)
	}
	cpuAfter, err := sampleCPU(tail.Process.Pid, cmd.Process.Pid, postmaster)
	if err != nil {
		b.Fatal(err)
	}
	stopReplicator() // first, so that it does not take the embedded server over
	stop()
	pg := func(kinds ...string) (before, after time.Duration) {
		for _, k := range kinds {
			before, after = before+cpuBefore.postgres[k], after+cpuAfter.postgres[k]
		}
		return before, after
	}
	pgBefore, pgAfter := pg("background", "walsender", "backend")
	wsBefore, wsAfter := pg("walsender")
	beBefore, beAfter := pg("backend")
	b.Logf("%s: CPU over %s of load and drain, %d writes: writer tail %s (system %s), replicator %s (system %s), postgres %s (walsender %s, backends %s), this process %s (system %s)",
		runName, time.Since(start).Round(time.Millisecond), n,
		cpuAfter.tail-cpuBefore.tail, cpuAfter.tailSys-cpuBefore.tailSys,
		cpuAfter.replicator-cpuBefore.replicator, cpuAfter.replicatorSys-cpuBefore.replicatorSys,
		pgAfter-pgBefore, wsAfter-wsBefore, beAfter-beBefore,
		cpuAfter.self-cpuBefore.self, cpuAfter.selfSys-cpuBefore.selfSys)
	return loadRun{
		writes: int(n), rate: float64(n) / elapsed.Seconds(),
		p50: p50, p99: p99, streamP50: sp50, streamP99: sp99, pmax: pmax, look: look,
		eventsPerWrite: float64(published-snapshot) / float64(n),
		loadBefore:     loadBefore, loadAfter: loadAfter,
		historyStart: float64(history), historyTo: float64(history) + float64(n)/float64(len(rids)),
		tailCPU:      perWrite(cpuBefore.tail, cpuAfter.tail, n),
		replCPU:      perWrite(cpuBefore.replicator, cpuAfter.replicator, n),
		tailSys:      perWrite(cpuBefore.tailSys, cpuAfter.tailSys, n),
		replSys:      perWrite(cpuBefore.replicatorSys, cpuAfter.replicatorSys, n),
		pgCPU:        perWrite(pgBefore, pgAfter, n),
		walsenderCPU: perWrite(wsBefore, wsAfter, n),
		backendCPU:   perWrite(beBefore, beAfter, n),
		selfCPU:      perWrite(cpuBefore.self, cpuAfter.self, n),
		fsCreate:     float64(fsCreate.Nanoseconds()) / 1000,
	}
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
