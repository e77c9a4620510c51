package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/testsize"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/stream"
)

// e2eVariant is one run of TestLiveMirrorPostgresS3ToDisk: how long the
// writer writes before, during and after the fault window, and the fault.
type e2eVariant struct {
	name                  string
	before, window, after time.Duration
	fault                 string // "", "503", "proxy-down", "server-stopped"
	largeBlob             int64  // size of the one large blob the writer stores mid-run
}

// TestLiveMirrorPostgresS3ToDisk is the end-to-end proof of live
// mirroring a Postgres+S3 SpecStar deployment to disk (issue 5). A Go
// writer plays SpecStar on a wal_level=logical cluster and a versitygw
// server (S3 first, then the meta row), creating and updating over two
// models, with doc payloads referencing blobs of 0 B, 1 B, small fresh
// ones and one large one. Meanwhile `writer tail` (logical replication;
// revisions and blobs read from S3 through a fault proxy, the only
// client of the proxy) and `replicator run --sink disk:DIR` run as real
// processes. Once the writer stops, `replicator verify` against the live
// deployment must report equal with exactly the counts written, and the
// mirror must hold every resource, revision and blob once, in the layout
// SpecStar's disk factory opens.
//
// Variants: steady (with a 50 MiB blob; 8 MiB outside the long suite);
// s3-503s (10% of the tail's S3 requests answered 503 SlowDown throughout
// the run); s3-down (the proxy cuts every connection for 30 s, 6 s outside
// the long suite, while the writer keeps writing straight to S3);
// s3-server-stopped (versitygw stopped as long and restarted on
// its port and data; SpecStar cannot write then, so the writer pauses,
// except for one write caught in flight: its S3 objects written before
// the stop, its meta committed after, so the tail must read S3 while it
// is gone). `writer tail` never exits on S3 failures by design (it
// retries each request, then restarts its stream with backoff and no
// deadline); the test asserts it is the same process at the end. The
// variants run in parallel, each with its own cluster, S3 server and
// stream (about two minutes in all in the long suite).
func TestLiveMirrorPostgresS3ToDisk(t *testing.T) {
	t.Parallel()
	writerBin, replBin := e2eBuild(t)
	// The long suite writes for 20 s (faults of 30 s, a 50 MiB blob); the
	// default one for 9 s (faults of 6 s, an 8 MiB blob), through the
	// same paths.
	sec := func(short, long float64) time.Duration {
		return time.Duration(testsize.Of(short, long) * float64(time.Second))
	}
	before, window, after := sec(3, 7.5), sec(6, 30), sec(3, 7.5)
	variants := []e2eVariant{
		{name: "steady", before: sec(3, 5), after: sec(6, 15), largeBlob: testsize.Of[int64](8<<20, 50<<20)},
		{name: "s3-503s", before: before, window: window, after: after, fault: "503", largeBlob: 2 << 20},
		{name: "s3-down", before: before, window: window, after: after, fault: "proxy-down", largeBlob: 2 << 20},
		{name: "s3-server-stopped", before: before, window: window, after: after, fault: "server-stopped", largeBlob: 2 << 20},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			e2eLiveMirror(t, writerBin, replBin, v)
		})
	}
}

func e2eLiveMirror(t *testing.T, writerBin, replBin string, v e2eVariant) {
	ctx := context.Background()
	began := time.Now()
	cluster := pgtest.StartLogical(t)
	srv := s3test.Start(t)
	srv.CreateBucket(t, "deploy")
	srv.CreateBucket(t, "files")
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	const prefix = "e2e_"
	w, err := specstarpg.Open(ctx, cluster.DSN, specstarpg.Options{TablePrefix: prefix,
		S3: &specstarpg.S3Target{Client: srv.Client(t), Bucket: "deploy", BlobBucket: "files"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, m := range e2eModels {
		if err := w.CreateModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	x, err := newE2EWriter(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	if v.fault == "503" {
		proxy.Fail503(0.10)
	}

	// The mirror's processes: the tail reads S3 through the proxy only.
	env := append(os.Environ(), srv.Env()...)
	from := cluster.DSN + "&table_prefix=" + prefix
	var tailLog, replLog syncBuffer
	tail := exec.Command(writerBin, "tail", "--from", from,
		"--resources", e2eS3URL("deploy", "{model}/data/", proxy.URL, srv.Region),
		"--blobs", e2eS3URL("files", "blobs/", proxy.URL, srv.Region),
		"--nats", bus.URL(), "--listen", "")
	tailExited := e2eStart(t, tail, env, &tailLog)
	mirror := t.TempDir()
	repl := exec.Command(replBin, "run", "--nats", bus.URL(), "--listen", "", "--sink", "disk:"+mirror)
	replExited := e2eStart(t, repl, env, &replLog)

	// The writer writes until stopped; the fault comes in the middle.
	stop, werr := make(chan struct{}), make(chan error, 1)
	go func() { werr <- x.run(ctx, stop, 100*time.Millisecond) }()
	large := func() (io.Reader, string) {
		return e2eBytes(byte(v.largeBlob>>20), v.largeBlob), "application/octet-stream"
	}
	time.Sleep(v.before)
	x.large <- large // written with the next doc (in the window, when there is one)
	var duringReqs, duringInjected, duringWrites int64
	var probeErr error
	switch v.fault {
	case "", "503":
		time.Sleep(v.window)
	case "proxy-down":
		inj, n := proxy.Injected(), x.writes.Load()
		proxy.Down(true)
		time.Sleep(v.window)
		proxy.Down(false)
		duringInjected, duringWrites = proxy.Injected()-inj, x.writes.Load()-n
	case "server-stopped":
		unlock := e2eCatchWriteInFlight(t, cluster.DSN, prefix)
		x.pause.Store(true)
		srv.Stop()
		reqs, n := proxy.Requests(), x.writes.Load()
		unlock() // the write caught in flight commits its meta: the tail must now read S3
		time.Sleep(v.window / 2)
		_, probeErr = (&http.Client{Timeout: 2 * time.Second}).Get(srv.Endpoint + "/")
		time.Sleep(v.window / 2)
		duringReqs, duringWrites = proxy.Requests()-reqs, x.writes.Load()-n
		srv.Restart(t)
		x.pause.Store(false)
	}
	time.Sleep(v.after)
	// Enough writes for the checks below, counted, not timed: a loaded
	// machine writes fewer in a fixed window.
	waitfor.Until(t, "the writer's writes", waitfor.Options{Progress: func() any { return x.writes.Load() }}, func() bool {
		_, _, blobs := x.ledger.counts()
		return x.writes.Load() >= testsize.Of[int64](30, 60) && blobs >= 4
	})
	close(stop)
	if err := <-werr; err != nil {
		t.Fatalf("the writer (SpecStar) failed a write: %v", err)
	}
	wroteFor := time.Since(began)
	metas, revisions, blobs := x.ledger.counts()
	if writes := x.writes.Load(); writes < testsize.Of[int64](30, 60) || blobs < 4 {
		t.Fatalf("the writer managed only %d writes referencing %d blobs", writes, blobs)
	}

	// Converge: compare the mirror with the live deployment (S3 reached
	// directly) until equal; the tail may still be catching up.
	stopped := time.Now()
	verifyArgs := []string{"--source", from,
		"--source-resources", e2eS3URL("deploy", "{model}/data/", srv.Endpoint, srv.Region),
		"--source-blobs", e2eS3URL("files", "blobs/", srv.Endpoint, srv.Region),
		"--sink", "disk:" + mirror}
	var got e2eVerified
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		got = e2eVerify(ctx, replBin, env, verifyArgs...)
		if got.equal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror did not converge within 3 minutes of the last write (%d resources, %d revisions, %d blobs written):\n%s\ntail log:\n%s\nreplicator log:\n%s",
				metas, revisions, blobs, lastLines(got.out, 30), lastLines(tailLog.String(), 40), lastLines(replLog.String(), 20))
		}
	}
	converged := time.Since(stopped)
	if got.metas != metas || got.revisions != revisions || got.blob != blobs {
		t.Errorf("verify compared %d metas, %d revisions, %d blobs; the writer stored %d resources, %d revisions, %d referenced blobs:\n%s",
			got.metas, got.revisions, got.blob, metas, revisions, blobs, lastLines(got.out, 5))
	}
	e2eCheckMirror(t, mirror, x.ledger)
	if !x.ledger.hasBlobSizes(0, 1, v.largeBlob) {
		t.Errorf("the payloads do not reference blobs of 0 B, 1 B and %d B", v.largeBlob)
	}

	// The same comparison with both deployments named in a configuration
	// file, as an operator would run it.
	cfg := filepath.Join(t.TempDir(), "specstar.yaml")
	yaml := "deployments:\n  prod:\n    meta: '" + from + "'\n    resources: '" + verifyArgs[3] + "'\n    blobs: '" + verifyArgs[5] +
		"'\n  mirror:\n    url: 'disk:" + mirror + "'\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if named := e2eVerify(ctx, replBin, env, "--config", cfg, "--source", "prod", "--sink", "mirror"); !named.equal ||
		named.metas != metas || named.revisions != revisions || named.blob != blobs {
		t.Errorf("verify --config %s --source prod --sink mirror:\n%s", cfg, lastLines(named.out, 10))
	}

	// The processes survived the faults.
	for _, p := range []struct {
		name   string
		exited <-chan struct{}
		log    *syncBuffer
	}{{"writer tail", tailExited, &tailLog}, {"replicator run", replExited, &replLog}} {
		select {
		case <-p.exited:
			t.Errorf("%s exited during the run:\n%s", p.name, lastLines(p.log.String(), 30))
		default:
		}
	}
	restarts := 0
	for _, line := range strings.Split(tailLog.String(), "\n") {
		if strings.Contains(line, "starting again") {
			if restarts++; restarts <= 3 {
				t.Logf("tail restart: %.400s", line)
			}
		}
	}
	switch v.fault {
	case "503":
		if proxy.Injected() == 0 {
			t.Error("the proxy injected no 503")
		}
	case "proxy-down":
		if duringInjected == 0 {
			t.Error("the tail sent no S3 request while its link was down: the outage was not exercised")
		}
		if duringWrites == 0 {
			t.Error("the writer wrote nothing while the mirror's link to S3 was down")
		}
	case "server-stopped":
		if probeErr == nil {
			t.Error("the S3 server answered while it was supposed to be stopped")
		}
		if duringReqs == 0 {
			t.Error("the tail sent no S3 request while the server was stopped: the outage was not exercised")
		}
		if duringWrites > 1 {
			t.Errorf("the writer wrote %d times while S3 was stopped (only the write caught in flight may land)", duringWrites)
		}
	}
	t.Logf("%s: wrote %d resources, %d revisions, %d blobs in %s; converged %s after the last write; "+
		"proxy: %d requests, %d failed on purpose (%d during the window, %d requests then); tail restarts: %d; total %s",
		v.name, metas, revisions, blobs, wroteFor.Round(100*time.Millisecond), converged.Round(100*time.Millisecond),
		proxy.Requests(), proxy.Injected(), duringInjected, duringReqs, restarts, time.Since(began).Round(100*time.Millisecond))
}

// e2eStart starts a process logging into log, stops it (SIGTERM, then
// SIGKILL after 10 s) when the test ends, and returns a channel closed
// when it exits.
func e2eStart(t *testing.T, cmd *exec.Cmd, env []string, log *syncBuffer) <-chan struct{} {
	t.Helper()
	cmd.Env, cmd.Stdout, cmd.Stderr = env, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with a killed test binary
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return exited
}

// e2eCatchWriteInFlight holds the meta tables in SHARE mode until the
// writer is blocked on its meta upsert, i.e. has written its S3 objects
// and not yet its meta; the returned function lets the write commit.
func e2eCatchWriteInFlight(t *testing.T, dsn, prefix string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+prefix+`doc_meta, `+prefix+`issue_meta IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(waitfor.Scaled(10 * time.Second)); ; time.Sleep(20 * time.Millisecond) {
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND starts_with(c.relname, $1)`, prefix).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no write blocked on the locked meta tables within 10 s")
		}
	}
	return func() {
		if err := tx.Commit(ctx); err != nil {
			t.Errorf("release the meta tables: %v", err)
		}
		conn.Close(ctx)
	}
}

// lastLines is the end of a log, for failure messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
