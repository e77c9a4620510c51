package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/testsize"
	"github.com/specstar/replicator/stream"
)

// TestLiveTailCrash kills the replicator (SIGKILL) while `writer tail
// --mode logical` streams a SpecStar deployment under load into a disk
// mirror (run's default group commit), restarts it each time, and checks
// once the load stops that the mirror verifies equal to the source and
// that no temporary file is left. By default 400 writes/s for 8 s with
// two kills; SPECSTAR_LONG=1: 1,000 writes/s for a minute, six kills.
func TestLiveTailCrash(t *testing.T) {
	t.Parallel() // seconds of waiting on processes: overlaps the package's other slow tests
	if testing.Short() {
		t.Skip("runs a throwaway cluster and two binaries")
	}
	rate, loadFor, wantKills := testsize.Of(400, 1000), testsize.Of(8*time.Second, time.Minute), testsize.Of(2, 6)
	const conns, resources = 10, 20
	replBin := buildReplicator(t)
	writerBin := buildWriter(t)
	ctx := t.Context()
	cluster := pgtest.StartLogical(t)
	prefix := "crash_"
	w, err := specstarpg.Open(ctx, cluster.DSN+fmt.Sprintf("&pool_max_conns=%d", conns+2), specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.CreateModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	from := cluster.DSN + "&table_prefix=" + prefix
	var tailLog, replLog lockedBuffer
	tail := exec.Command(writerBin, "tail", "--mode", "logical", "--from", from, "--nats", bus.URL(), "--listen", "")
	tail.Stdout, tail.Stderr = &tailLog, &tailLog
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { tail.Process.Signal(syscall.SIGTERM); tail.Wait() }()

	mirror := t.TempDir()
	startRepl := func() (*exec.Cmd, <-chan error) {
		cmd := exec.Command(replBin, "run", "--nats", bus.URL(), "--listen", "", "--ack-wait", "2s", "--sink", mirror+"?name=live")
		cmd.Stdout, cmd.Stderr = &replLog, &replLog
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, done
	}
	repl, replDone := startRepl()
	stopped := false
	stopRepl := func() {
		if !stopped {
			stopped = true
			repl.Process.Signal(syscall.SIGTERM)
			<-replDone
		}
	}
	defer stopRepl()

	acked := func() uint64 {
		var floor uint64
		for ci := range bus.Stream.ListConsumers(ctx).Info() {
			floor = max(floor, ci.AckFloor.Stream)
		}
		return floor
	}
	// The resources, created before the load, and the pipeline live:
	// the replicator has acknowledged their metas and revisions.
	for i := range resources {
		rid := fmt.Sprintf("issue:%03d", i)
		if _, err := w.Create(ctx, "issue", rid, crashPayload(rid, 0), specstarpg.Write{}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); acked() < 2*resources; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pipeline never applied the %d creates (acked up to %d)\nreplicator:\n%s\ntail:\n%s", resources, acked(), replLog.String(), tailLog.String())
		}
	}

	// The load: conns connections, each owning resources i%conns ==
	// conn and updating them paced at rate/conns a second (at once when
	// behind) until loadFor has passed and every kill is done (so that a
	// slow machine still kills during the load).
	var writes atomic.Int64
	var killed atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	start := time.Now()
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rids []string
			for i := c; i < resources; i += conns {
				rids = append(rids, fmt.Sprintf("issue:%03d", i))
			}
			for j := 0; time.Since(start) < loadFor || !killed.Load(); j++ {
				if d := time.Until(start.Add(time.Duration(j*conns+c) * time.Second / time.Duration(rate))); d > 0 {
					time.Sleep(d) // pacing the load, not waiting for a result
				}
				rid := rids[j%len(rids)]
				if _, err := w.Update(ctx, "issue", rid, crashPayload(rid, j+1), specstarpg.Write{}); err != nil {
					errs <- fmt.Errorf("update %s: %w", rid, err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	loadDone := make(chan struct{})
	go func() { wg.Wait(); close(loadDone) }()

	// The kills: each once the replicator has acknowledged more of the
	// stream than before it started, spread over the load's first 80%.
	kills := 0
	for kills < wantKills {
		at := start.Add(loadFor * time.Duration(4*(kills+1)) / time.Duration(5*wantKills+5))
		floor := acked()
		for giveUp := time.Now().Add(2 * time.Minute); time.Now().Before(at) || acked() <= floor; {
			select {
			case err := <-replDone:
				t.Fatalf("replicator exited before its kill: %v\n%s", err, replLog.String())
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(giveUp) {
				t.Fatalf("the restarted replicator acknowledged nothing in 2 minutes (acked up to %d)\n%s", floor, replLog.String())
			}
		}
		_ = repl.Process.Signal(syscall.SIGKILL)
		<-replDone
		kills++
		repl, replDone = startRepl()
	}
	killed.Store(true)
	<-loadDone
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("the load: %v", err)
	}
	n := writes.Load()
	t.Logf("%d writes in %v (%.0f/s), %d kills", n, time.Since(start).Round(time.Millisecond), float64(n)/time.Since(start).Seconds(), kills)

	// Converge: the restarted replicator applies what the tail published
	// (redelivered batches included); compare with Postgres until equal.
	deadline := time.Now().Add(testsize.Of(90*time.Second, 5*time.Minute))
	for {
		out, err := exec.Command(replBin, "verify", "--source", from, "--sink", mirror).CombinedOutput()
		if err == nil && strings.Contains(string(out), ": equal:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror did not converge after %d writes and %d kills:\n%s\nreplicator:\n%s\ntail:\n%s", n, kills, out, replLog.String(), tailLog.String())
		}
		time.Sleep(200 * time.Millisecond) // polling the condition
	}
	stopRepl()
	var leftovers []string
	filepath.WalkDir(mirror, func(p string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(mirror, p)
		if err == nil && !d.IsDir() && strings.HasPrefix(rel, ".specstar-tmp") {
			leftovers = append(leftovers, rel)
		}
		return nil
	})
	if len(leftovers) != 0 {
		t.Errorf("%d temporary files left behind by the kills: %v", len(leftovers), leftovers)
	}
}

// crashPayload is a small SpecStar struct value: the resource's id and
// the write's number.
func crashPayload(title string, n int) events.Value {
	return events.Struct{Declared: 2, Fields: []events.StructField{{Name: "title", Value: title}, {Name: "n", Value: int64(n)}}}
}

// lockedBuffer is a bytes.Buffer safe to read while a child process
// writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
