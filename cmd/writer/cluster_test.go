package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/internal/testsupport/natscluster"
	"github.com/specstar/replicator/internal/testsupport/synth"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/internal/testsupport/testsize"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/stream"
)

// clusterArchive is the archive the cluster tests replay: SpecStar's
// medium fixture (2,240 records) by default, a synthetic one of 22,000
// records in the long suite.
func clusterArchive(t *testing.T) string {
	t.Helper()
	if !testsize.Long() {
		return testfixtures.Path(t, "medium.acbak")
	}
	path := filepath.Join(t.TempDir(), "cluster.acbak")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	if _, err := synth.Write(w, synth.Spec{Models: 2, Resources: 1000, RevisionsPerResource: 10, PayloadSize: 1024, Encoding: events.JSON, Seed: 11}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// clusterReference is a clean run: the archive replayed onto an embedded
// single server and drained into a fresh tree, by the same binaries. It
// returns the tree and the messages the stream holds (streamIDs).
func clusterReference(t *testing.T, writerBin, replBin, archive string) (tree string, ids map[string][]string) {
	t.Helper()
	dataDir := t.TempDir()
	tree = filepath.Join(t.TempDir(), "clean")
	for _, args := range [][]string{
		{writerBin, "replay", "--from", archive, "--data-dir", dataDir},
		{replBin, "run", "--data-dir", dataDir, "--until-drained", "--to", tree + "?sync=batch&name=clean"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("clean run %v: %v\n%s", args[1:], err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := stream.Open(ctx, stream.Config{DataDir: dataDir, ReadOnly: true}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	return tree, streamIDs(ctx, t, bus)
}

// streamIDs counts the message ids of every message the stream holds,
// read one stream sequence at a time (a direct get from the leader,
// riding through elections): what the stream holds, whatever a consumer
// would deliver. An ordered consumer's Fetch, used before, starts a new
// consumer at every call; under load after a leader kill one run counted
// four ids twice and four missing, none of them among the publishes
// that had been retried, and the total right: the pattern of a reader
// that read four messages twice and stopped four short.
//
// It maps each message id to the hashes of the payloads stored under it,
// so that a message held twice, or holding other bytes than the clean
// run's under the same id, shows in the stream rather than only later in
// a sink.
func streamIDs(ctx context.Context, t *testing.T, bus *stream.Bus) map[string][]string {
	t.Helper()
	info, err := stream.Call(ctx, bus, "stream info", func(ctx context.Context) (*jetstream.StreamInfo, error) { return bus.Stream.Info(ctx) })
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string][]string{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := stream.Call(ctx, bus, "stream get", func(ctx context.Context) (*jetstream.RawStreamMsg, error) { return bus.Stream.GetMsg(ctx, seq) })
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed: not held
		}
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		sum := sha256.Sum256(m.Data)
		id := m.Header.Get(events.HeaderMsgID)
		ids[id] = append(ids[id], fmt.Sprintf("seq %d: %x", seq, sum[:8]))
	}
	return ids
}

// treeSums maps every file and link under root to its content's hash (or
// link target).
func treeSums(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case rel == disk.MarkDir && d.IsDir():
			return filepath.SkipDir // the replicator's marks, not SpecStar's tree
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "-> " + target
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			out[rel] = hex.EncodeToString(s[:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree fails the test unless got holds exactly want's files, byte for
// byte.
func sameTree(t *testing.T, got, want string) {
	t.Helper()
	g, w := treeSums(t, got), treeSums(t, want)
	for rel, sum := range w {
		if g[rel] != sum {
			t.Errorf("%s: %s differs from the clean run's", got, rel)
		}
	}
	for rel := range g {
		if _, ok := w[rel]; !ok {
			t.Errorf("%s: %s is not in the clean run's tree", got, rel)
		}
	}
	if len(w) == 0 {
		t.Errorf("the clean run wrote nothing")
	}
}

// sameIDs fails the test unless the stream holds every message id of the
// clean run's stream exactly once, and nothing else.
func sameIDs(t *testing.T, got, want map[string][]string) {
	t.Helper()
	payload := func(at string) string { _, h, _ := strings.Cut(at, ": "); return h }
	for id, at := range got {
		if len(at) != 1 {
			t.Errorf("message %s is %d times in the stream (%v)", id, len(at), at)
		}
		if len(want[id]) == 0 {
			t.Errorf("message %s is not in the clean run's stream", id)
			continue
		}
		for _, a := range at {
			if payload(a) != payload(want[id][0]) {
				t.Errorf("message %s holds other bytes (%s) than in the clean run's stream (%s)", id, a, want[id][0])
			}
		}
	}
	for id := range want {
		if len(got[id]) == 0 {
			t.Errorf("message %s is missing from the stream", id)
		}
	}
}

// killLeaderWhen kills the stream leader's server once progress() reaches
// each of kills evenly spaced points before total, and starts it again
// after a pause, while exited stays open. It returns how many kills
// happened while the process ran.
func killLeaderWhen(ctx context.Context, t *testing.T, c *natscluster.Cluster, kills int, total uint64, progress func() uint64, exited <-chan struct{}) int {
	t.Helper()
	done := 0
	for k := 1; k <= kills; k++ {
		at := total * uint64(k) / uint64(kills+1)
		for progress() < at {
			select {
			case <-exited:
				return done
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		leader, err := c.Leader(ctx, "SPECSTAR")
		if err != nil {
			t.Fatal(err)
		}
		now := progress()
		c.Kill(leader)
		t.Logf("killed stream leader %s at %d of %d", c.Nodes[leader].Name, now, total)
		done++
		time.Sleep(2 * time.Second)
		c.Restart(leader)
	}
	return done
}

// TestClusterLeaderKilled runs the engine on a three-node JetStream
// cluster (separate nats-server processes) with an R3 stream: the stream
// leader's server is killed (SIGKILL) and restarted while `writer replay`
// publishes, again while `replicator run --until-drained` applies, and
// `run` is started while a server is down. Every process exits 0 on its
// own, the ones connected to the killed server reconnect by themselves,
// the stream holds each message exactly once, the sinks equal a clean
// run's tree byte for byte, and `replicator verify` exits 0.
func TestClusterLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster and the commands as processes")
	}
	t.Parallel()
	// One deadline for every subtest: scaled by the load, as a loaded
	// machine once used it up before the last subtest began.
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Scaled(testsize.Of(3*time.Minute, 15*time.Minute)))
	defer cancel()
	writerBin, replBin := buildBinary(t, "."), buildBinary(t, "../replicator")
	archive := clusterArchive(t)
	cleanTree, cleanIDs := clusterReference(t, writerBin, replBin, archive)
	total := uint64(len(cleanIDs))
	kills := testsize.Of(1, 3)

	c := natscluster.Start(t, 3)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	bus, err := stream.Open(ctx, stream.Config{URL: c.URLs(), Replicas: 3}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	lastSeq := func() uint64 {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		info, err := bus.Stream.Info(ictx)
		if err != nil {
			return 0
		}
		return info.State.LastSeq
	}

	t.Run("replay", func(t *testing.T) {
		// Connected to the leader only: its kill takes the writer's
		// connection too, and the writer finds the others by itself.
		leader, err := c.Leader(ctx, "SPECSTAR")
		if err != nil {
			t.Fatal(err)
		}
		var log syncBuffer
		cmd := exec.Command(writerBin, "replay", "--from", archive, "--nats", c.Nodes[leader].URL(), "--max-inflight", "8", "-v")
		exited := e2eStart(t, cmd, os.Environ(), &log)
		n := killLeaderWhen(ctx, t, c, kills, total, lastSeq, exited)
		<-exited
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("writer replay exited %d:\n%s", code, lastLines(log.String(), 40))
		}
		if n == 0 {
			t.Fatalf("writer replay finished before the kill; enlarge the archive:\n%s", lastLines(log.String(), 20))
		}
		if !strings.Contains(log.String(), "NATS reconnected") {
			t.Errorf("writer replay never said it reconnected:\n%s", lastLines(log.String(), 40))
		}
		sameIDs(t, streamIDs(ctx, t, bus), cleanIDs)
		t.Logf("writer replay rode through %d kills; log:\n%s", n, grepLines(log.String(), "WARN", "reconnected", "available"))
	})

	if t.Failed() || lastSeq() < total {
		t.Fatalf("the stream holds %d of the archive's %d events: the replay step failed or did not run", lastSeq(), total)
	}

	// The sink's consumer floor, for timing the kills.
	ackFloor := func(name string) func() uint64 {
		return func() uint64 {
			ictx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			cons, err := bus.Stream.Consumer(ictx, name)
			if err != nil {
				return 0
			}
			return cons.CachedInfo().AckFloor.Stream
		}
	}

	t.Run("run", func(t *testing.T) {
		leader, err := c.Leader(ctx, "SPECSTAR")
		if err != nil {
			t.Fatal(err)
		}
		tree := filepath.Join(t.TempDir(), "sink")
		listen := freeAddr(t)
		var log syncBuffer
		cmd := exec.Command(replBin, "run", "--nats", c.Nodes[leader].URL(), "--until-drained", "--listen", listen,
			"--batch", "32", "--ack-wait", "5s", "--to", tree+"?sync=file&name=killed", "-v")
		exited := e2eStart(t, cmd, os.Environ(), &log)
		var notReady atomic.Int64
		go watchReady(ctx, listen, exited, &notReady)
		n := killLeaderWhen(ctx, t, c, kills, total, ackFloor("killed"), exited)
		<-exited
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("replicator run exited %d:\n%s", code, lastLines(log.String(), 40))
		}
		if n == 0 {
			t.Fatalf("replicator run finished before the kill; enlarge the archive:\n%s", lastLines(log.String(), 20))
		}
		if !strings.Contains(log.String(), "NATS reconnected") {
			t.Errorf("replicator run never said it reconnected:\n%s", lastLines(log.String(), 40))
		}
		if notReady.Load() == 0 {
			t.Errorf("/readyz never answered not ready while the process had lost its server")
		}
		checkSink(ctx, t, replBin, c, archive, tree, cleanTree)
		t.Logf("replicator run rode through %d kills (/readyz answered not ready %d times); log:\n%s", n, notReady.Load(),
			grepLines(log.String(), "WARN", "reconnected", "available"))
	})

	t.Run("run started while a server is down", func(t *testing.T) {
		leader, err := c.Leader(ctx, "SPECSTAR")
		if err != nil {
			t.Fatal(err)
		}
		c.Kill(leader)
		tree := filepath.Join(t.TempDir(), "sink")
		var log syncBuffer
		cmd := exec.Command(replBin, "run", "--nats", c.URLs(), "--until-drained", "--listen", "",
			"--ack-wait", "5s", "--to", tree+"?sync=batch&name=started-down", "-v")
		began := time.Now()
		exited := e2eStart(t, cmd, os.Environ(), &log)
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
		}
		c.Restart(leader)
		<-exited
		t.Logf("replicator run took %s", time.Since(began).Round(time.Millisecond))
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("replicator run exited %d:\n%s", code, lastLines(log.String(), 40))
		}
		checkSink(ctx, t, replBin, c, archive, tree, cleanTree)
		t.Logf("replicator run started with %s down; log:\n%s", c.Nodes[leader].Name, lastLines(log.String(), 30))
	})
}

// TestClusterQuorumLost: with two of three servers down (no quorum, no
// meta leader), `replicator run` as a service keeps running, /healthz
// answers and /readyz says not ready until the cluster is back, then
// ready; `run --until-drained` gives up after --unavailable-timeout,
// saying so.
func TestClusterQuorumLost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster and the commands as processes")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	replBin := buildBinary(t, "../replicator")
	c := natscluster.Start(t, 3)
	bus, err := stream.Open(ctx, stream.Config{URL: c.URLs(), Replicas: 3}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	bus.Close()
	c.Kill(0)
	c.Kill(1)

	listen := freeAddr(t)
	var svcLog, batchLog syncBuffer
	svc := exec.Command(replBin, "run", "--nats", c.URLs(), "--listen", listen, "--to", filepath.Join(t.TempDir(), "svc")+"?name=svc")
	svcExited := e2eStart(t, svc, os.Environ(), &svcLog)
	began := time.Now()
	batch := exec.Command(replBin, "run", "--nats", c.URLs(), "--until-drained", "--unavailable-timeout", "3s", "--listen", "",
		"--to", filepath.Join(t.TempDir(), "batch")+"?name=batch")
	batchExited := e2eStart(t, batch, os.Environ(), &batchLog)
	select {
	case <-batchExited:
	case <-time.After(60 * time.Second):
		t.Fatalf("run --until-drained --unavailable-timeout 3s still runs after 60 s without a quorum:\n%s", lastLines(batchLog.String(), 20))
	}
	if code := batch.ProcessState.ExitCode(); code != exitError || !strings.Contains(batchLog.String(), "--unavailable-timeout") {
		t.Errorf("run --until-drained without a quorum: exit %d after %s, want %d naming --unavailable-timeout:\n%s",
			code, time.Since(began).Round(time.Millisecond), exitError, lastLines(batchLog.String(), 20))
	}
	time.Sleep(time.Until(began.Add(8 * time.Second)))
	select {
	case <-svcExited:
		t.Fatalf("run (a service) exited without a quorum:\n%s", lastLines(svcLog.String(), 20))
	default:
	}
	status := func(path string) int {
		resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + listen + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if h, r := status("/healthz"), status("/readyz"); h != http.StatusOK || r != http.StatusServiceUnavailable {
		t.Errorf("without a quorum: /healthz %d, /readyz %d; want 200 and 503", h, r)
	}
	c.Restart(0)
	c.Restart(1)
	for status("/readyz") != http.StatusOK {
		select {
		case <-svcExited:
			t.Fatalf("run (a service) exited:\n%s", lastLines(svcLog.String(), 20))
		case <-ctx.Done():
			t.Fatalf("/readyz not ready 2 min after the cluster came back:\n%s", lastLines(svcLog.String(), 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("the service waited and became ready; its log:\n%s", grepLines(svcLog.String(), "WARN", "available"))
}

// checkSink runs `replicator verify` of tree against the archive (exit 0)
// and compares it with the clean run's tree.
func checkSink(ctx context.Context, t *testing.T, replBin string, c *natscluster.Cluster, archive, tree, cleanTree string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, replBin, "verify", "--from", archive, "--to", tree).CombinedOutput()
	if err != nil {
		t.Errorf("replicator verify: %v\n%s", err, out)
	}
	sameTree(t, tree, cleanTree)
}

// watchReady polls /readyz on addr until exited closes, counting the
// answers that were not 200.
func watchReady(ctx context.Context, addr string, exited <-chan struct{}, notReady *atomic.Int64) {
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-exited:
			return
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			continue // not listening yet, or gone
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			notReady.Add(1)
		}
	}
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// grepLines keeps the log lines holding any of words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	if len(out) > 30 {
		out = append(out[:30], fmt.Sprintf("... %d more", len(out)-30))
	}
	return strings.Join(out, "\n")
}
