package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/specstar/replicator/internal/testsupport/freeport"
)

// readyz is the status /readyz on addr answers (0: no answer).
func readyz(addr string) int {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRunWaitsForNATS (issue 23, item 2): `replicator run` exited 2 at
// once when NATS was not up yet (a CrashLoopBackOff on Kubernetes). As a
// service it now waits, /readyz not ready, and becomes ready once the
// server starts; --until-drained still fails at once.
func TestRunWaitsForNATS(t *testing.T) {
	port := freeport.Take(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	start := time.Now()
	if code, _, errs := runCmd(t, "run", "--nats", url, "--to", t.TempDir(), "--until-drained"); code != exitError || time.Since(start) > 20*time.Second {
		t.Fatalf("run --until-drained with no NATS: exit %d after %v, want %d at once\n%s", code, time.Since(start), exitError, errs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	listen := freeport.Addr(t)
	var out, errs lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--nats", url, "--to", t.TempDir(), "--listen", listen}, &out, &errs)
	}()
	for !strings.Contains(errs.String(), "NATS not reachable") || readyz(listen) != http.StatusServiceUnavailable {
		select {
		case code := <-done:
			t.Fatalf("run exited %d while NATS was down:\n%s", code, errs.String())
		case <-ctx.Done():
			t.Fatalf("run logged no wait, or /readyz answered %d:\n%s", readyz(listen), errs.String())
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
			t.Fatalf("run exited %d once NATS was up:\n%s", code, errs.String())
		case <-ctx.Done():
			t.Fatalf("run never became ready once NATS was up:\n%s", errs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("run stopped with exit %d:\n%s%s", code, out.String(), errs.String())
	}
}
