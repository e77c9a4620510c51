package stream

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/httpops"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
)

// TestEmbeddedServerRequiresItsToken (issue 12, item 13): the embedded
// server accepted anyone on the host, so another local user could publish
// a PurgeRecord. Now a client without the token kept 0600 in the data
// directory is refused, and processes of the owner (which can read it)
// still share the server.
func TestEmbeddedServerRequiresItsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	bus, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()

	st, err := os.Stat(filepath.Join(dir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}
	bare, err := os.ReadFile(filepath.Join(dir, urlFile))
	if err != nil {
		t.Fatal(err)
	}
	// Another user knows the port (it is in the world-readable URL file),
	// not the token.
	if nc, err := nats.Connect(string(bare), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatalf("a client without the token connected to the embedded server at %s", bare)
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("refused, but not for authorization: %v", err)
	}
	if nc, err := nats.Connect(string(bare), nats.Token("guess"), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client with a wrong token connected")
	}
	// The owner's other processes join through the data directory, or
	// through the URL the bus hands out (tests and scripts pass it as
	// --nats); neither shows the token in what it logs.
	joined, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatalf("a second process of the owner cannot join: %v", err)
	}
	joined.Close()
	viaURL, err := Open(ctx, Config{URL: bus.URL()}, log)
	if err != nil {
		t.Fatalf("connect with the bus's URL: %v", err)
	}
	viaURL.Close()
	if tok := bus.token; tok == "" || strings.Contains(RedactURL(bus.URL()), tok) {
		t.Fatalf("RedactURL(%q) shows the token", RedactURL(bus.URL()))
	}
}

// TestNonNATSURLsAreRefused (issue 12, item 4): --nats http://... was
// handed to nats.go, which tried it as a NATS server.
func TestNonNATSURLsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"nats://127.0.0.1:4222", true},
		{"tls://nats.example:4222", true},
		{"ws://127.0.0.1:8080,wss://b:443", true},
		{"127.0.0.1:4222", true},
		{"nats://a:4222,nats://b:4222", true},
		{"http://127.0.0.1:4222", false},
		{"https://user:secret@nats.example", false},
		{"nats://a:4222,postgres://b", false},
		{"ftp://x", false},
		// Issue 34: these dialled nats.go's default, 127.0.0.1:4222.
		{",,,", false},
		{" ", false},
		{"nats://a:4222,", false},
		{"nats://", false},
		{"nats://:4222", false},
		{":4222", false},
	} {
		err := CheckURL(tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("CheckURL(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the refusal shows the password: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Open(ctx, Config{URL: "http://127.0.0.1:1"}, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil ||
		!strings.Contains(err.Error(), "not a NATS URL") {
		t.Fatalf("Open with an http URL: %v", err)
	}
}

// TestTempDataDirSweepsAbandonedOnes (issue 12, item 14): a killed
// `replicator mirror` left its throw-away stream directory (the size of
// the archive) under the temporary directory forever. The next one
// removes it, and leaves alone the directory of a mirror still running.
func TestTempDataDirSweepsAbandonedOnes(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	running, err := TempDataDir()
	if err != nil {
		t.Fatal(err)
	}
	bus, err := Open(ctx, Config{DataDir: running}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()

	killed, err := TempDataDir()
	if err != nil {
		t.Fatal(err)
	}
	// What a killed mirror leaves: its lock file (free, since its process
	// is gone) and the stream's files.
	if err := os.WriteFile(filepath.Join(killed, lockFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(killed, "jetstream", "big"), 0o755); err != nil {
		t.Fatal(err)
	}

	fresh, err := TempDataDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(killed); !os.IsNotExist(err) {
		t.Errorf("the killed mirror's directory survived: %v", err)
	}
	for _, d := range []string{running, fresh} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a live directory was removed: %v", err)
		}
	}
}

// TestExistingStreamIsNeverChangedImplicitly (issue 12, items 1-3): every
// command called create-or-update with its own flag values, so a
// `replicator status` or `writer replay` run without the same
// --max-age/--duplicate-window/--subject-prefix reset what `replicator
// run` had set, and a writer could not publish to a stream made with
// --retention workqueue. Now an existing stream is used as it is, a
// setting given explicitly that differs is an error naming it, a
// read-only Open creates nothing, and Apply is the one way to change it.
func TestExistingStreamIsNeverChangedImplicitly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()

	// A read-only command before anything exists: no stream is created.
	if _, err := Open(ctx, Config{DataDir: dir, ReadOnly: true}, log); err == nil ||
		!strings.Contains(err.Error(), "no stream SPECSTAR") {
		t.Fatalf("read-only Open of a missing stream: %v", err)
	}

	made := Config{DataDir: dir, SubjectPrefix: "acme", MaxAge: 2 * time.Hour, DuplicateWindow: 5 * time.Minute,
		Retention: "workqueue", Given: map[string]bool{"subject-prefix": true, "max-age": true, "duplicate-window": true, "retention": true}}
	first, err := Open(ctx, made, log)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	// Another command without those flags: the stream keeps them, and the
	// command works with the stream's subject prefix.
	plain, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatalf("a writer without the stream flags, on a workqueue stream: %v", err)
	}
	if plain.Prefix() != "acme" {
		t.Errorf("the command publishes under %q, the stream takes acme.>", plain.Prefix())
	}
	plain.Close()
	info, err := first.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.MaxAge != 2*time.Hour || c.Duplicates != 5*time.Minute || c.Subjects[0] != "acme.>" || retentionName(c.Retention) != "workqueue" {
		t.Fatalf("the stream's settings changed: %+v", c)
	}

	// A flag given explicitly that differs: an error naming the setting.
	_, err = Open(ctx, Config{DataDir: dir, MaxAge: time.Hour, Given: map[string]bool{"max-age": true}}, log)
	if err == nil || !strings.Contains(err.Error(), "max-age") || !strings.Contains(err.Error(), "2h0m0s") {
		t.Fatalf("a differing --max-age: %v", err)
	}
	// The same value given is fine.
	same, err := Open(ctx, Config{DataDir: dir, MaxAge: 2 * time.Hour, Given: map[string]bool{"max-age": true}}, log)
	if err != nil {
		t.Fatalf("an equal --max-age: %v", err)
	}
	same.Close()

	// A mistyped --stream in a read-only command lists what is there.
	if _, err := Open(ctx, Config{DataDir: dir, Stream: "TYPO", ReadOnly: true}, log); err == nil ||
		!strings.Contains(err.Error(), "no stream TYPO") || !strings.Contains(err.Error(), "SPECSTAR") {
		t.Fatalf("read-only Open of a mistyped stream: %v", err)
	}

	// Apply changes it, explicitly.
	change, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer change.Close()
	got, err := change.Apply(ctx, Config{MaxAge: 3 * time.Hour, Given: map[string]bool{"max-age": true}})
	if err != nil || got.MaxAge != 3*time.Hour || got.Subjects[0] != "acme.>" || got.Duplicates != 5*time.Minute {
		t.Fatalf("Apply: %v %+v", err, got)
	}
}

// TestEmbeddedServerSurvivesItsHost (issue 12, item 21): when the process
// hosting the embedded server of a shared data directory left, the others
// logged "NATS disconnected" and never reconnected (the next host served
// on a new random port while they retried the old URL), and their /readyz
// kept answering 200. Now a survivor takes the server over on the same
// directory (and port), every client dials the URL the directory names,
// and readiness is false while disconnected.
func TestEmbeddedServerSurvivesItsHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	first, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if !first.hostsEmbedded() || second.hostsEmbedded() {
		t.Fatal("want the first Open to host and the second to join")
	}
	oldURL := first.URL()

	// /readyz as the commands serve it, and a watcher of every answer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := httpops.Serve(ctx, addr, prometheus.NewRegistry(), second.Connected, log); err != nil {
		t.Fatal(err)
	}
	ready := func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	deadline := time.Now().Add(5 * time.Second)
	for !ready() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !ready() {
		t.Fatal("/readyz is not ready while connected")
	}
	var sawNotReady, sawDisconnected atomic.Bool
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			if !second.Connected() {
				sawDisconnected.Store(true)
				if !ready() {
					sawNotReady.Store(true)
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	first.Close() // the host leaves
	// A takeover takes a few hundred milliseconds; on a machine loaded
	// tenfold it once took over 15 s, so the wait grows with the load.
	deadline = time.Now().Add(waitfor.Scaled(30 * time.Second))
	for !(second.Connected() && ready()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stopWatch)
	<-watched
	if !second.Connected() {
		t.Fatalf("the survivor did not reconnect within %s (still at %s)", waitfor.Scaled(30*time.Second), RedactURL(second.URL()))
	}
	if !ready() {
		t.Fatal("/readyz is not ready again after the reconnect")
	}
	if !sawDisconnected.Load() || !sawNotReady.Load() {
		t.Errorf("disconnected seen: %v, /readyz not ready while disconnected: %v", sawDisconnected.Load(), sawNotReady.Load())
	}
	if !second.hostsEmbedded() {
		t.Error("the survivor did not take the server over")
	}
	if second.URL() != oldURL {
		t.Logf("the new host serves on %s, not the old port %s", RedactURL(second.URL()), RedactURL(oldURL))
	}

	// It can publish and read on the stream the old server kept.
	pub := second.NewPublisher(4)
	env, err := events.EnvelopeFor(second.Prefix(), "issue", &events.BlobRecord{FileID: "after", BlobData: []byte("y"), Size: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	msg, err := second.Stream.GetLastMsgForSubject(ctx, env.Subject)
	if err != nil || string(msg.Data) != string(env.Payload) {
		t.Fatalf("read back after the takeover: %v", err)
	}
	// A later Open joins the new host.
	third, err := Open(ctx, Config{DataDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if third.hostsEmbedded() || third.URL() != second.URL() {
		t.Fatalf("a later Open did not join the new host: %s vs %s", RedactURL(third.URL()), RedactURL(second.URL()))
	}
}

// TestClientsDialTheURLTheDataDirNames (issue 12, item 21): clients of an
// embedded server kept dialing the URL they first joined, so when the
// next host served on another port they never found it. Now a client
// dials the URL the data directory names at each attempt.
func TestClientsDialTheURLTheDataDirNames(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.WriteFile(filepath.Join(dir, urlFile), []byte("nats://"+ln.Addr().String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &dirDialer{dataDir: dir, net: net.Dialer{Timeout: 2 * time.Second}}
	c, err := d.Dial("tcp", "127.0.0.1:1") // the old, dead address
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	if d.lastAddr() != ln.Addr().String() {
		t.Fatalf("dialed %s, want the address the data directory names, %s", d.lastAddr(), ln.Addr())
	}
}
