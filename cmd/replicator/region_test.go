package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/stream"
)

// regionServer starts one in-process nats-server with JetStream in the
// given domain, on a random loopback port, with its files under dir.
func regionServer(t *testing.T, name, domain, dir string, leaf func(*server.Options)) (*server.Server, *server.Options) {
	t.Helper()
	opts := &server.Options{
		ServerName:      name,
		Host:            "127.0.0.1",
		Port:            server.RANDOM_PORT,
		JetStream:       true,
		JetStreamDomain: domain,
		StoreDir:        filepath.Join(dir, "jetstream"),
		NoSigs:          true,
		NoLog:           true,
	}
	leaf(opts)
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("server %s: %v", name, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		t.Fatalf("server %s did not start", name)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv, opts // the server writes the ports it chose back into opts
}

// linkProxy forwards TCP connections to target until cut, which closes
// the open ones and refuses new ones (a network partition between the
// regions) until restore.
type linkProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
	delay  time.Duration // added before every chunk forwarded (a slow link)
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { p.copy(u, c); u.Close(); c.Close() }()
			go func() { p.copy(c, u); u.Close(); c.Close() }()
		}
	}()
	return p
}

// copy forwards from src to dst, each chunk after the link's delay.
func (p *linkProxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			time.Sleep(d)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// slow makes the link add d before every chunk it forwards.
func (p *linkProxy) slow(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *linkProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *linkProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func waitFor(t *testing.T, what string, wait time.Duration, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		done, state := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (%s)", wait, what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// streamState is a stream's LastSeq and Msgs, or zeros if it is absent.
func streamState(ctx context.Context, js jetstream.JetStream, name string) (last, msgs uint64) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, 0
	}
	return info.State.LastSeq, info.State.Msgs
}

// waitCaughtUp waits until B's mirrors of the event stream and of the blob
// bucket's stream hold exactly what A's hold.
func waitCaughtUp(t *testing.T, jsA, jsB jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"SPECSTAR", "OBJ_SPECSTAR_BLOBS"} {
		waitFor(t, "mirror "+name+" in region b to catch up", 90*time.Second, func() (bool, string) {
			aLast, aMsgs := streamState(ctx, jsA, name)
			bLast, bMsgs := streamState(ctx, jsB, name)
			return aLast > 0 && aLast == bLast && aMsgs == bMsgs,
				fmt.Sprintf("a: last %d msgs %d; b: last %d msgs %d", aLast, aMsgs, bLast, bMsgs)
		})
	}
}

func jsFor(t *testing.T, u string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestRegionMirrorOverLeafNode: region A (JetStream domain a) takes the
// events; region B (domain b), a leaf node of A, runs the replicator on a
// local mirror of A's stream and of its blob bucket. B materializes what
// A published (blobs.acbak's 1 MiB blob through the mirrored object
// store); with the link cut, A goes on publishing and B goes on serving
// what it has; once the link is back, B's mirror catches up without
// duplicates and B's sink converges.
// regions are two JetStream servers, region A (domain a) and region B
// (domain b, a leaf node of A through a link that can be cut).
type regions struct {
	srvA, srvB *server.Server
	link       *linkProxy
	aURL, bURL string
	jsA, jsB   jetstream.JetStream
}

// twoRegions starts region A and region B and waits for their link.
func twoRegions(t *testing.T) *regions {
	t.Helper()
	srvA, optsA := regionServer(t, "region-a", "a", t.TempDir(), func(o *server.Options) {
		o.LeafNode.Host = "127.0.0.1"
		o.LeafNode.Port = server.RANDOM_PORT
		// B reaches A through the proxy only: A must not tell B its own
		// leaf-node address, or B would reconnect around the cut.
		o.LeafNode.NoAdvertise = true
	})
	leafPort := optsA.LeafNode.Port
	link := newLinkProxy(t, fmt.Sprintf("127.0.0.1:%d", leafPort))
	remote, _ := url.Parse("nats-leaf://" + link.ln.Addr().String())
	srvB, _ := regionServer(t, "region-b", "b", t.TempDir(), func(o *server.Options) {
		o.LeafNode.ReconnectInterval = 200 * time.Millisecond
		o.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{remote}}}
	})
	waitFor(t, "the leaf-node link", 30*time.Second, func() (bool, string) {
		return srvA.NumLeafNodes() == 1 && srvB.NumLeafNodes() == 1,
			fmt.Sprintf("a has %d leaf nodes, b %d", srvA.NumLeafNodes(), srvB.NumLeafNodes())
	})
	aURL, bURL := srvA.ClientURL(), srvB.ClientURL()
	jsA, jsB := jsFor(t, aURL), jsFor(t, bURL)
	return &regions{srvA: srvA, srvB: srvB, link: link, aURL: aURL, bURL: bURL, jsA: jsA, jsB: jsB}
}

// waitLink waits until the leaf-node link is up (or down).
func (r *regions) waitLink(t *testing.T, up bool) {
	t.Helper()
	want := 0
	if up {
		want = 1
	}
	waitFor(t, "the leaf-node link", 30*time.Second, func() (bool, string) {
		return r.srvA.NumLeafNodes() == want && r.srvB.NumLeafNodes() == want,
			fmt.Sprintf("a has %d leaf nodes, b %d", r.srvA.NumLeafNodes(), r.srvB.NumLeafNodes())
	})
}

func TestRegionMirrorOverLeafNode(t *testing.T) {
	ctx := context.Background()
	r := twoRegions(t)
	srvA, srvB, link, aURL, bURL, jsA, jsB := r.srvA, r.srvB, r.link, r.aURL, r.bURL, r.jsA, r.jsB

	// Region A: the origin stream, as `writer replay --nats A` makes it.
	busA, err := stream.Open(ctx, stream.Config{URL: aURL, DataDir: t.TempDir()}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(busA.Close)
	stats := replay(t, busA, testfixtures.Path(t, "small.acbak"))
	stats2 := replay(t, busA, testfixtures.Path(t, "blobs.acbak"))
	if stats2.BlobsPut != 1 {
		t.Fatalf("blobs.acbak put %d blobs in the object store, want its 1 MiB blob (%+v)", stats2.BlobsPut, stats2)
	}
	t.Logf("region a: published %d + %d events", stats.Published, stats2.Published)

	mirrorArgs := []string{"--nats", bURL, "--mirror-of", "SPECSTAR", "--mirror-domain", "a"}
	sink := t.TempDir()
	runB := func() string {
		t.Helper()
		args := append([]string{"run"}, mirrorArgs...)
		args = append(args, "--until-drained", "--listen", "", "--sink", sink)
		code, out, errs := runCmd(t, args...)
		if code != exitOK {
			t.Fatalf("replicator run in region b: exit %d\n%s%s", code, out, errs)
		}
		if !strings.Contains(out, " 0 dead-lettered") {
			t.Fatalf("dead letters in region b: %s", out)
		}
		return out
	}
	verify := func(name string, wantCode int) {
		t.Helper()
		code, out, errs := runCmd(t, "verify", "--archive", testfixtures.Path(t, name), "--sink", sink)
		if code != wantCode {
			t.Fatalf("verify %s: exit %d, want %d\n%s%s", name, code, wantCode, out, errs)
		}
	}

	// The first run creates B's mirrors (the bus does on open); once they
	// hold what A holds, a drain materializes everything.
	bootstrap, err := stream.Open(ctx, stream.Config{URL: bURL, DataDir: t.TempDir(), MirrorOf: "SPECSTAR", MirrorDomain: "a"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if !bootstrap.IsMirror() || bootstrap.BlobBucket() != "SPECSTAR_BLOBS" {
		t.Fatalf("mirror bus: mirror %v, blob bucket %s", bootstrap.IsMirror(), bootstrap.BlobBucket())
	}
	bootstrap.Close()
	waitCaughtUp(t, jsA, jsB)
	t.Logf("region b, first drain: %s", strings.TrimSpace(runB()))
	verify("small.acbak", exitOK)
	verify("blobs.acbak", exitOK)

	// B's event stream is a mirror: no subjects, no publishes of its own.
	s, err := jsB.Stream(ctx, "SPECSTAR")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.Mirror == nil || cfg.Mirror.Name != "SPECSTAR" || cfg.Mirror.External == nil ||
		cfg.Mirror.External.APIPrefix != "$JS.a.API" || len(cfg.Subjects) != 0 {
		t.Fatalf("region b's stream config: %+v (mirror %+v)", cfg, cfg.Mirror)
	}

	// Cut the link; A publishes more while B cannot see it.
	link.cut()
	waitFor(t, "the link to go down", 30*time.Second, func() (bool, string) {
		return srvA.NumLeafNodes() == 0 && srvB.NumLeafNodes() == 0,
			fmt.Sprintf("a has %d leaf nodes, b %d", srvA.NumLeafNodes(), srvB.NumLeafNodes())
	})
	replay(t, busA, testfixtures.Path(t, "msgpack.acbak"))
	// And a new large blob, so the object store's mirror has to catch up
	// too: 2 MiB, through A's object store, and its reference event.
	big := make([]byte, 2<<20)
	for i := range big {
		big[i] = byte(i * 7 / 5)
	}
	bigID := dedup.FileID(big)
	pubA := busA.NewPublisher(4)
	if err := pubA.PutBlob(ctx, bigID, big); err != nil {
		t.Fatal(err)
	}
	publishRaw(t, busA, "issue", &events.BlobRefRecord{FileID: bigID, Size: int64(len(big)), Bucket: busA.BlobBucket()}, nil)
	aLast, _ := streamState(ctx, jsA, "SPECSTAR")
	time.Sleep(time.Second)
	if bLast, _ := streamState(ctx, jsB, "SPECSTAR"); bLast >= aLast {
		t.Fatalf("with the link cut, region b's mirror is at %d, a at %d", bLast, aLast)
	} else {
		t.Logf("link cut: region a at %d, region b's mirror still at %d", aLast, bLast)
	}
	// B keeps serving what it has: a drain succeeds, msgpack is not there yet.
	runB()
	verify("blobs.acbak", exitOK)
	verify("msgpack.acbak", exitDiffer)

	// Restore the link: the mirror resumes where it stopped and B converges.
	link.restore()
	waitFor(t, "the link to come back", 30*time.Second, func() (bool, string) {
		return srvA.NumLeafNodes() == 1 && srvB.NumLeafNodes() == 1,
			fmt.Sprintf("a has %d leaf nodes, b %d", srvA.NumLeafNodes(), srvB.NumLeafNodes())
	})
	start := time.Now()
	waitCaughtUp(t, jsA, jsB)
	t.Logf("region b's mirrors caught up %s after the link came back", time.Since(start).Round(time.Millisecond))
	t.Logf("region b, after the outage: %s", strings.TrimSpace(runB()))
	for _, name := range []string{"small.acbak", "blobs.acbak", "msgpack.acbak"} {
		verify(name, exitOK)
	}
	if st, err := os.Stat(filepath.Join(sink, "_blobs", bigID)); err != nil || st.Size() <= int64(len(big)) {
		t.Fatalf("the blob published during the outage is not in region b's sink: %v", err)
	}
	// Nothing duplicated: the mirror holds exactly A's messages.
	for _, name := range []string{"SPECSTAR", "OBJ_SPECSTAR_BLOBS"} {
		aLast, aMsgs := streamState(ctx, jsA, name)
		bLast, bMsgs := streamState(ctx, jsB, name)
		if aLast != bLast || aMsgs != bMsgs {
			t.Fatalf("%s: a has %d messages (last %d), b %d (last %d)", name, aMsgs, aLast, bMsgs, bLast)
		}
		t.Logf("%s: %d messages in both regions", name, aMsgs)
	}
	// Dead letters stay in their region: B's go to subjects of B's own,
	// which A's dead-letter stream does not take over the leaf node.
	busB, err := stream.Open(ctx, stream.Config{URL: bURL, DataDir: t.TempDir(), MirrorOf: "SPECSTAR", MirrorDomain: "a"}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer busB.Close()
	if got := busB.DLQSubjects(); got != "specstar_dlq_b.>" {
		t.Fatalf("region b's dead-letter subjects: %s", got)
	}
	if _, err := busB.JS.Publish(ctx, busB.DLQSubject("probe"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_, aDead := streamState(ctx, jsA, "SPECSTAR_DLQ")
	_, bDead := streamState(ctx, jsB, "SPECSTAR_DLQ")
	if aDead != 0 || bDead != 1 {
		t.Fatalf("a dead letter of region b: %d in a's SPECSTAR_DLQ, %d in b's", aDead, bDead)
	}
}

// TestMirrorDrainWaitsForOrigin (issue 12, item 20): `run
// --until-drained` in a mirror region, started right after the mirror was
// created, drained up to what the mirror held at start (nothing yet) and
// exited at once with nothing applied (seen once in three runs under
// load; a slow link makes it certain). It now waits for the mirror to
// catch up with its origin.
func TestMirrorDrainWaitsForOrigin(t *testing.T) {
	ctx := context.Background()
	r := twoRegions(t)
	busA, err := stream.Open(ctx, stream.Config{URL: r.aURL, DataDir: t.TempDir()}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(busA.Close)
	replay(t, busA, testfixtures.Path(t, "small.acbak"))

	// The link is slow, so the mirror the drain creates holds nothing
	// yet when the drain starts.
	r.link.slow(300 * time.Millisecond)
	sink := t.TempDir()
	start := time.Now()
	code, out, errs := runCmd(t, "run", "--nats", r.bURL, "--mirror-of", "SPECSTAR", "--mirror-domain", "a",
		"--until-drained", "--listen", "", "--sink", sink)
	t.Logf("drained in %s", time.Since(start).Round(time.Millisecond))
	res := struct {
		code      int
		out, errs string
	}{code, out, errs}
	if res.code != exitOK || !strings.Contains(res.out, "16 events applied") {
		t.Fatalf("drain in region b: exit %d\n%s%s", res.code, res.out, res.errs)
	}
	if code, out, errs := runCmd(t, "verify", "--archive", testfixtures.Path(t, "small.acbak"), "--sink", sink); code != exitOK {
		t.Fatalf("verify: %d\n%s%s", code, out, errs)
	}
}
