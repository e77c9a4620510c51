package stream_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/stream"
)

// syncBuffer is a log a goroutine writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startNATSOn starts a JetStream server on port.
func startNATSOn(t *testing.T, port int) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"), NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server did not start")
	}
}

// TestOpenWaitsForTheServer (issue 23, item 2): a service exited at once
// when NATS was not reachable yet. With WaitForServer, Open retries,
// logging each attempt, and connects once the server is up; without it,
// it fails at once.
func TestOpenWaitsForTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := freeport.Take(t)
	url := "nats://bob:S3cretPw@127.0.0.1:" + strconv.Itoa(port)

	start := time.Now()
	if _, err := stream.Open(ctx, stream.Config{URL: url, InMemory: true}, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("Open without WaitForServer connected to nothing")
	} else if time.Since(start) > 10*time.Second {
		t.Fatalf("Open without WaitForServer took %v to fail", time.Since(start))
	}

	var logs syncBuffer
	type opened struct {
		bus *stream.Bus
		err error
	}
	done := make(chan opened, 1)
	go func() {
		b, err := stream.Open(ctx, stream.Config{URL: url, InMemory: true, WaitForServer: true}, slog.New(slog.NewTextHandler(&logs, nil)))
		done <- opened{b, err}
	}()
	for strings.Count(logs.String(), "NATS not reachable") < 2 {
		select {
		case o := <-done:
			t.Fatalf("Open returned before the server started: %v", o.err)
		case <-ctx.Done():
			t.Fatalf("no retries logged: %s", logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	startNATSOn(t, port)
	select {
	case o := <-done:
		if o.err != nil {
			t.Fatalf("Open once the server is up: %v", o.err)
		}
		o.bus.Close()
	case <-ctx.Done():
		t.Fatalf("Open did not connect once the server was up:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "S3cretPw") {
		t.Errorf("the retry log shows the password:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "attempt=1") {
		t.Errorf("attempts are not numbered:\n%s", logs.String())
	}
}
