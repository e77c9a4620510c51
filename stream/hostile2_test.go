package stream

// Regression tests for the second hostile review (issue 26): another user
// of the host against the embedded server.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestEmbeddedDataDirIsPrivate (issue 26, item 1): the data directory was
// 0755 and its lock and URL files 0644, so another local user could flock
// the lock and every command of the owner failed. Now the directory is
// 0700, one an earlier version left 0755 is made so, and no file in it is
// open to others.
func TestEmbeddedDataDirIsPrivate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
	}{
		{"new", func(*testing.T, string) {}},
		{"left 0755 with a 0644 lock", func(t *testing.T, dir string) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, lockFile), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dir := filepath.Join(t.TempDir(), "nats")
			tc.prepare(t, dir)
			bus, err := Open(ctx, Config{DataDir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer bus.Close()
			st, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o700 {
				t.Errorf("data dir mode %04o, want 0700", st.Mode().Perm())
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, e := range entries {
				if !e.Type().IsRegular() {
					continue
				}
				seen[e.Name()] = true
				info, err := e.Info()
				if err != nil {
					t.Fatal(err)
				}
				if info.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s mode %04o: open to other users", e.Name(), info.Mode().Perm())
				}
			}
			for _, want := range []string{lockFile, urlFile, tokenFile, certFile, keyFile} {
				if !seen[want] {
					t.Errorf("no %s in the data dir (have %v)", want, seen)
				}
			}
		})
	}
}

// TestEmbeddedRefusesADataDirOthersCanWrite (issue 26, item 1): a data
// directory that group or others can write is refused with the reason,
// not used.
func TestEmbeddedRefusesADataDirOthersCanWrite(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o770, 0o702} {
		dir := filepath.Join(t.TempDir(), "nats")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		bus, err := Open(ctx, Config{DataDir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		cancel()
		if err == nil {
			bus.Close()
			t.Fatalf("mode %04o: opened a data dir other users can write", mode)
		}
		if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "other users can write") {
			t.Errorf("mode %04o: error %q names neither the directory nor the reason", mode, err)
		}
		if _, err := os.Stat(filepath.Join(dir, tokenFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("mode %04o: a token was written into the refused directory", mode)
		}
	}
}

// TestEmbeddedClientTrustsOnlyItsServer (issue 26, item 1): after the
// host of the embedded server died, another local user listened on the
// freed port; the owner's next client connected there and sent its token
// (with which the attacker published a PurgeRecord), or was served the
// attacker's own stream. Now a client of the data directory speaks only
// TLS to a server holding the directory's key: each impostor is refused
// before the token is sent, and gets no stream made on it.
func TestEmbeddedClientTrustsOnlyItsServer(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := filepath.Join(t.TempDir(), "nats")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	token := host.token
	host.Close() // leaves the token and the certificate, as a dead host does

	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (addr string, got func() string, stream func() bool)
	}{
		{"a listener that records what it is sent", recordingImpostor},
		{"a NATS server without auth or TLS", func(t *testing.T) (string, func() string, func() bool) {
			return natsImpostor(t, nil)
		}},
		{"a NATS server with a certificate of its own", func(t *testing.T) (string, func() string, func() bool) {
			other := t.TempDir()
			cfg, err := embeddedServerTLS(other)
			if err != nil {
				t.Fatal(err)
			}
			return natsImpostor(t, cfg)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, got, madeStream := tc.start(t)
			// The lock is held (the owner's process that would host is
			// still starting) and the URL file names the freed port, now
			// the impostor's.
			lf, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, urlFile), []byte("nats://"+addr), 0o600); err != nil {
				t.Fatal(err)
			}
			bus, err := Open(ctx, Config{DataDir: dir}, log)
			if err == nil {
				bus.Close()
				t.Fatalf("the client connected to the impostor at %s", addr)
			}
			if s := got(); strings.Contains(s, token) {
				t.Fatalf("the impostor was sent the token: %q", s)
			}
			if madeStream != nil && madeStream() {
				t.Fatal("the client made its stream on the impostor")
			}
			_ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
		})
	}

	// The owner's next process hosts the real server again and works.
	_ = os.Remove(filepath.Join(dir, urlFile))
	again, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatalf("the owner cannot host again: %v", err)
	}
	again.Close()
}

// recordingImpostor listens on a loopback port, greets each connection as
// a NATS server offering no TLS would, and keeps every byte it is sent.
func recordingImpostor(t *testing.T) (string, func() string, func() bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var got strings.Builder
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.WriteString(c, `INFO {"server_id":"impostor","version":"2.10.0","proto":1,"host":"127.0.0.1","port":4222,"max_payload":1048576,"auth_required":true}`+"\r\n")
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				r := bufio.NewReader(c)
				buf := make([]byte, 4096)
				for {
					n, err := r.Read(buf)
					mu.Lock()
					got.Write(buf[:n])
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() string {
		mu.Lock()
		defer mu.Unlock()
		return got.String()
	}, nil
}

// natsImpostor runs a real JetStream server that asks for no credentials
// (so it would take any token), with tlsConfig if not nil.
func natsImpostor(t *testing.T, tlsConfig *tls.Config) (string, func() string, func() bool) {
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	if tlsConfig != nil {
		opts.TLSConfig, opts.TLSTimeout, opts.AllowNonTLS = tlsConfig, 10, true
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("impostor server did not start")
	}
	addr := srv.Addr().String()
	url := "nats://" + addr
	return addr, func() string { return "" }, func() bool {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatalf("look at the impostor: %v", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = js.Stream(context.Background(), "SPECSTAR")
		return err == nil
	}
}
