package httpops

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specstar/replicator/internal/testsupport/freeport"
)

// serveShort serves with sub-second timeouts on a free loopback port and
// returns its address.
func serveShort(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr := freeport.Addr(t)
	to := Timeouts{ReadHeader: 300 * time.Millisecond, Read: 300 * time.Millisecond, Write: time.Second, Idle: 300 * time.Millisecond}
	if err := ServeWith(ctx, addr, to, prometheus.NewRegistry(), func() bool { return true }, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	return addr
}

// closedWithin reports whether the server closes c within d (reading
// until EOF or a reset).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// TestIdleKeepAliveConnectionIsClosed is issue 26 item 11: after a
// response, a kept-alive connection that sends nothing more was held
// forever (500 idle connections still open after 65 s).
func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	addr := serveShort(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("healthz: status %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	if !closedWithin(c, 10*time.Second) {
		t.Fatal("an idle kept-alive connection was still open 10 s after its response (idle timeout 300 ms)")
	}
}

// TestSilentConnectionIsClosed: a connection that never sends a request
// is closed too.
func TestSilentConnectionIsClosed(t *testing.T) {
	addr := serveShort(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedWithin(c, 10*time.Second) {
		t.Fatal("a connection that sent nothing was still open after 10 s (header timeout 300 ms)")
	}
}

// TestConnectedAndBuildInfo (issue 23, item 4): a service exports
// specstar_nats_connected, following the connection, and
// specstar_build_info with its version and Go version.
func TestConnectedAndBuildInfo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var up atomic.Bool
	reg := prometheus.NewRegistry()
	if err := Register(reg, up.Load); err != nil {
		t.Fatal(err)
	}
	addr := freeport.Addr(t)
	if err := Serve(ctx, addr, reg, up.Load, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		t.Helper()
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	body := scrape()
	for _, want := range []string{"specstar_nats_connected 0\n", `specstar_build_info{goversion="go`, `version="`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	up.Store(true)
	if body := scrape(); !strings.Contains(body, "specstar_nats_connected 1\n") {
		t.Errorf("connected, /metrics still says:\n%s", body)
	}
}
