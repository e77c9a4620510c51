package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/stream"
)

// The live-tail benchmark's load: lagRate updates a second for lagFor,
// round-robin over lagResources resources (created beforehand), each
// payload about 1 KiB.
const (
	lagResources = 100
	lagRate      = 50
	lagFor       = 20 * time.Second
	lagModel     = "issue"
	lagTimeout   = time.Minute
)

// lagPoll is how often a write's meta file is read: 5 ms, or
// $BENCH_LAG_POLL (a duration) for a finer resolution.
var lagPoll = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("BENCH_LAG_POLL")); err == nil && d > 0 {
		return d
	}
	return 5 * time.Millisecond
}()

// lagBuffer is an io.Writer safe for a process's stdout and stderr.
type lagBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lagBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lagBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func lagPayload(rid string, n int) events.Value {
	return events.Struct{Declared: 3, Fields: []events.StructField{
		{Name: "title", Value: rid},
		{Name: "n", Value: int64(n)},
		{Name: "body", Value: strings.Repeat(string(rune('a'+n%26)), 1000)},
	}}
}

// lagSinkCount reads a resource's meta file in the disk sink and returns
// its total_revision_count (0 while there is none).
func lagSinkCount(dir, rid string) int64 {
	raw, err := os.ReadFile(filepath.Join(dir, lagModel, "meta", rid+".data"))
	if err != nil {
		return 0
	}
	// The benchmarks look at every watched resource every few ms: the
	// count is read straight out of the compact JSON SpecStar's encoding
	// writes, and the whole meta decoded only when that fails.
	if i := bytes.Index(raw, []byte(`"total_revision_count":`)); i >= 0 {
		digits := raw[i+len(`"total_revision_count":`):]
		end := 0
		for end < len(digits) && digits[end] >= '0' && digits[end] <= '9' {
			end++
		}
		if n, err := strconv.ParseInt(string(digits[:end]), 10, 64); err == nil && end < len(digits) && (digits[end] == ',' || digits[end] == '}') {
			return n
		}
	}
	m, err := events.DecodeResourceMeta(events.JSON, raw)
	if err != nil {
		return 0
	}
	return m.TotalRevisionCount
}

// lagWaiter records, per write, the time from the write's commit (or
// publication) until the disk sink's meta file shows it.
type lagWaiter struct {
	dir    string
	wg     sync.WaitGroup
	mu     sync.Mutex
	lags   []time.Duration
	missed int
}

// watch polls every lagPoll until rid's meta in the sink counts n
// revisions or more, and records the time since t.
func (l *lagWaiter) watch(rid string, n int64, t time.Time) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			if lagSinkCount(l.dir, rid) >= n {
				lag := time.Since(t)
				l.mu.Lock()
				l.lags = append(l.lags, lag)
				l.mu.Unlock()
				return
			}
			if time.Since(t) > lagTimeout {
				l.mu.Lock()
				l.missed++
				l.mu.Unlock()
				return
			}
			time.Sleep(lagPoll)
		}
	}()
}

// percentiles waits for every watch and returns p50 and p99 in ms.
func (l *lagWaiter) percentiles(b *testing.B, what string) (float64, float64) {
	b.Helper()
	l.wg.Wait()
	if l.missed > 0 || len(l.lags) == 0 {
		b.Fatalf("%s: %d writes never reached the sink within %s (%d did)", what, l.missed, lagTimeout, len(l.lags))
	}
	s := slices.Clone(l.lags)
	slices.Sort(s)
	at := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return float64(s[max(0, min(i, len(s)-1))]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.99)
}

// waitSinkHas waits until the sink holds every resource's first revision.
func waitSinkHas(b *testing.B, dir string, rids []string, what string) {
	b.Helper()
	deadline := time.Now().Add(lagTimeout)
	for _, rid := range rids {
		for lagSinkCount(dir, rid) < 1 {
			if time.Now().After(deadline) {
				b.Fatalf("%s: the sink never got %s", what, rid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// startReplicator runs `replicator run` against a stream, into a disk
// sink, until the returned stop is called.
func startReplicator(b *testing.B, bin, natsURL, dir string) (stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out lagBuffer
	cmd := exec.CommandContext(ctx, bin, "run", "--nats", natsURL, "--sink", dir, "--listen", "")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return func() {
		cancel()
		cmd.Wait()
	}
}

// BenchmarkTailLag measures how long a write to a SpecStar Postgres
// deployment takes to reach a disk mirror through the live pipeline:
// specstarpg commits an update on a wal_level=logical throwaway cluster,
// `writer tail` (in-process, logical replication) publishes it onto an
// embedded JetStream stream, and `replicator run` (a process) applies it
// to a disk sink. The lag of a write runs from the moment its Update
// returns (committed) until the sink's meta file for the resource, polled
// every 5 ms (see lagPoll), shows its total_revision_count.
//
// The baseline, in the same run, is the same pipeline without Postgres:
// the same meta and revision events (the ones the writes produced) are
// published with a stream.Publisher, at the same rate, onto a fresh
// stream read by a fresh replicator into a fresh sink; its lag runs from
// just before the publication to the sink showing it.
func BenchmarkTailLag(b *testing.B) {
	repl := buildBinary(b, "../replicator")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var tailP50, tailP99, baseP50, baseP99, rate float64
	for b.Loop() {
		ctx := context.Background()

		// Postgres, its writer and the creates.
		cluster := pgtest.StartLogical(b)
		prefix := "lag_"
		w, err := specstarpg.Open(ctx, cluster.DSN, specstarpg.Options{TablePrefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		if err := w.CreateModel(ctx, lagModel); err != nil {
			b.Fatal(err)
		}
		rids := make([]string, lagResources)
		var creates, updates []*specstarpg.Written
		for i := range rids {
			rids[i] = fmt.Sprintf("%s:%03d", lagModel, i)
			wr, err := w.Create(ctx, lagModel, rids[i], lagPayload(rids[i], 0), specstarpg.Write{})
			if err != nil {
				b.Fatal(err)
			}
			creates = append(creates, wr)
		}

		// The pipeline: the stream, the tail, the replicator.
		bus, err := stream.Open(ctx, stream.Config{DataDir: b.TempDir()}, quiet)
		if err != nil {
			b.Fatal(err)
		}
		sinkDir := b.TempDir()
		stopRepl := startReplicator(b, repl, bus.URL(), sinkDir)
		tctx, stopTail := context.WithCancel(ctx)
		tailDone := make(chan string, 1)
		go func() {
			var out, errs bytes.Buffer
			code := run(tctx, []string{"tail", "--from", cluster.DSN + "&table_prefix=" + prefix, "--mode", "logical",
				"--nats", bus.URL(), "--listen", ""}, &out, &errs)
			tailDone <- fmt.Sprintf("exit %d: %s%s", code, out.String(), errs.String())
		}()
		waitSinkHas(b, sinkDir, rids, "tail: the slot's snapshot")
		time.Sleep(time.Second) // the tail is streaming from the slot now

		// The measured writes.
		waiter := &lagWaiter{dir: sinkDir}
		tick := time.NewTicker(time.Second / lagRate)
		start := time.Now()
		var last time.Time
		for i := 0; time.Since(start) < lagFor; i++ {
			<-tick.C
			rid := rids[i%lagResources]
			wr, err := w.Update(ctx, lagModel, rid, lagPayload(rid, i+1), specstarpg.Write{})
			last = time.Now()
			if err != nil {
				b.Fatalf("update %s: %v", rid, err)
			}
			waiter.watch(rid, wr.Meta.TotalRevisionCount, last)
			updates = append(updates, wr)
		}
		tick.Stop()
		rate = float64(len(updates)-1) / last.Sub(start).Seconds()
		tailP50, tailP99 = waiter.percentiles(b, "tail")
		stopTail()
		if out := <-tailDone; !strings.Contains(out, "exit 0") {
			b.Fatalf("writer tail: %s", out)
		}
		stopRepl()
		bus.Close()
		w.Close()

		// The baseline: the same events, published directly.
		bus, err = stream.Open(ctx, stream.Config{DataDir: b.TempDir()}, quiet)
		if err != nil {
			b.Fatal(err)
		}
		sinkDir = b.TempDir()
		stopRepl = startReplicator(b, repl, bus.URL(), sinkDir)
		pub := bus.NewPublisher(512)
		publish := func(wr *specstarpg.Written) {
			meta, err := wr.Meta.Encode(events.Msgpack)
			if err != nil {
				b.Fatal(err)
			}
			res := &events.RawResource{Info: *wr.Info, RawData: wr.Data}
			rev, err := res.Encode(events.Msgpack)
			if err != nil {
				b.Fatal(err)
			}
			for _, rec := range []events.Record{&events.MetaRecord{Data: meta}, &events.RevisionRecord{Data: rev}} {
				env, err := events.EnvelopeFor(bus.Prefix(), lagModel, rec, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := pub.Publish(ctx, env); err != nil {
					b.Fatal(err)
				}
			}
			if err := pub.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for _, wr := range creates {
			publish(wr)
		}
		waitSinkHas(b, sinkDir, rids, "baseline: the creates")
		time.Sleep(time.Second)
		waiter = &lagWaiter{dir: sinkDir}
		tick = time.NewTicker(time.Second / lagRate)
		for _, wr := range updates {
			<-tick.C
			t := time.Now()
			publish(wr)
			waiter.watch(wr.Meta.ResourceID, wr.Meta.TotalRevisionCount, t)
		}
		tick.Stop()
		baseP50, baseP99 = waiter.percentiles(b, "baseline")
		stopRepl()
		bus.Close()
	}
	b.ReportMetric(rate, "writes/s")
	b.ReportMetric(tailP50, "tail-p50-ms")
	b.ReportMetric(tailP99, "tail-p99-ms")
	b.ReportMetric(baseP50, "direct-p50-ms")
	b.ReportMetric(baseP99, "direct-p99-ms")
	b.ReportMetric(float64(lagPoll)/float64(time.Millisecond), "poll-ms")
}
