package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/specstar/replicator/internal/freeport"
	"github.com/specstar/replicator/internal/specstarpg"
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
	w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", dsn, err)
	}
	t.Cleanup(func() { w.DropAll(context.Background()); w.Close() })
	if err := w.CreateModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
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
