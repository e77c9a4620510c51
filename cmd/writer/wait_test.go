package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
)

// lockedBuffer is a stderr the command writes while the test reads it.
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

// readyz is the status /readyz on addr answers (0: no answer).
func readyz(addr string) int {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTailWaitsForNATS (issue 23, item 2): `writer tail` exited 2 at once
// when NATS was not up yet. It now waits, serving /healthz with /readyz
// not ready, and streams once the server starts.
func TestTailWaitsForNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := pgDSN()
	prefix := fmt.Sprintf("ww_%d_", time.Now().UnixNano()%1_000_000_000)
	issueModel(ctx, t, dsn, prefix)
	port := freeport.Take(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	listen := freeport.Addr(t)
	var out, errs lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"tail", "--from", dsn + "&table_prefix=" + prefix, "--mode", "poll", "--interval", "100ms", "--nats", url, "--listen", listen}, &out, &errs)
	}()
	for !strings.Contains(errs.String(), "NATS not reachable") || readyz(listen) != http.StatusServiceUnavailable {
		select {
		case code := <-done:
			t.Fatalf("tail exited %d while NATS was down:\n%s", code, errs.String())
		case <-ctx.Done():
			t.Fatalf("tail logged no wait, or /readyz answered %d:\n%s", readyz(listen), errs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	for readyz(listen) != http.StatusOK {
		select {
		case code := <-done:
			t.Fatalf("tail exited %d once NATS was up:\n%s", code, errs.String())
		case <-ctx.Done():
			t.Fatalf("tail never became ready once NATS was up:\n%s", errs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("tail stopped with exit %d:\n%s%s", code, out.String(), errs.String())
	}
}

// TestTailWaitsForPostgres (issue 34, smaller items): `writer tail`
// exited 2 in 0.12 s when its Postgres refused connections, although a
// source lost later is waited for and the README says refused
// connections are retried. It now waits, saying so, and publishes once
// the server answers (here a proxy to the test server, opened late).
func TestTailWaitsForPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := pgDSN()
	prefix := fmt.Sprintf("wp_%d_", time.Now().UnixNano()%1_000_000_000)
	w := issueModel(ctx, t, dsn, prefix)
	if _, err := w.Create(ctx, "issue", "issue:0", payload("issue:0", 0), specstarpg.Write{}); err != nil {
		t.Fatal(err)
	}
	target, err := neturl.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	late := *target
	port := freeport.Take(t)
	late.Host = "127.0.0.1:" + strconv.Itoa(port)
	bus := testStream(t)
	tail := startInBackground(ctx, "tail", "--from", late.String()+"&table_prefix="+prefix, "--mode", "poll", "--interval", "100ms", "--nats", bus.URL(), "--listen", "")
	tail.waitUntil(ctx, t, "wait for Postgres logged", func() bool { return strings.Contains(tail.errs.String(), "Postgres not reachable; waiting for it") })

	// Postgres answers now: a proxy on the port the tail dials.
	ln, err := net.Listen("tcp", late.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target.Host)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	tail.waitUntil(ctx, t, "events published once Postgres answered", func() bool {
		info, err := bus.Stream.Info(ctx)
		return err == nil && info.State.Msgs >= 2 // issue:0's meta and revision
	})
	cancel()
	tail.stoppedCleanly(t)
}

// TestTailOfNoTablesSaysSo (issue 34, smaller items): `writer tail` in
// poll mode of a database without SpecStar's tables (a wrong
// table_prefix, or a deployment not written yet) polled forever without
// a word. It still polls (SpecStar may create them), warning that it
// found none, and publishes once a model appears.
func TestTailOfNoTablesSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := pgDSN()
	prefix := fmt.Sprintf("wn_%d_", time.Now().UnixNano()%1_000_000_000)
	bus := testStream(t)
	tail := startInBackground(ctx, "tail", "--from", dsn+"&table_prefix="+prefix, "--mode", "poll", "--interval", "100ms", "--nats", bus.URL(), "--listen", "")
	tail.waitUntil(ctx, t, "warning that no meta tables exist", func() bool { return strings.Contains(tail.errs.String(), "no SpecStar meta tables found") })
	w := issueModel(ctx, t, dsn, prefix)
	if _, err := w.Create(ctx, "issue", "issue:0", payload("issue:0", 0), specstarpg.Write{}); err != nil {
		t.Fatal(err)
	}
	tail.waitUntil(ctx, t, "events published once the model exists", func() bool {
		info, err := bus.Stream.Info(ctx)
		return err == nil && info.State.Msgs >= 2
	})
	// A service logs its lifecycle at INFO without -v (issue 34, item 4).
	if !strings.Contains(tail.errs.String(), `level=INFO msg="following changes by polling"`) {
		t.Errorf("tail did not log at INFO how it follows:\n%s", tail.errs.String())
	}
	cancel()
	tail.stoppedCleanly(t)
}

// issueModel is a SpecStar Postgres deployment on the test server with
// the model issue, under prefix, dropped when the test ends.
func issueModel(ctx context.Context, t *testing.T, dsn, prefix string) *specstarpg.Writer {
	t.Helper()
	w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", dsn, err)
	}
	t.Cleanup(func() { w.DropAll(context.Background()); w.Close() })
	if err := w.CreateModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
	return w
}

// backgroundTail is a writer command (a tail) running while the test
// watches what it does.
type backgroundTail struct {
	out, errs lockedBuffer
	done      chan int
}

// startInBackground runs the writer with args until ctx ends.
func startInBackground(ctx context.Context, args ...string) *backgroundTail {
	b := &backgroundTail{done: make(chan int, 1)}
	go func() { b.done <- run(ctx, args, &b.out, &b.errs) }()
	return b
}

// waitUntil waits for cond, failing the test if the tail exits first or
// ctx ends.
func (b *backgroundTail) waitUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case code := <-b.done:
			t.Fatalf("tail exited %d before %s:\n%s", code, what, b.errs.String())
		case <-ctx.Done():
			t.Fatalf("no %s:\n%s", what, b.errs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stoppedCleanly waits for the tail, whose context was cancelled, and
// checks it exited 0.
func (b *backgroundTail) stoppedCleanly(t *testing.T) {
	t.Helper()
	if code := <-b.done; code != exitOK {
		t.Errorf("tail stopped with exit %d:\n%s%s", code, b.out.String(), b.errs.String())
	}
}
