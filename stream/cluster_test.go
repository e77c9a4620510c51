package stream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/natscluster"
	"github.com/specstar/replicator/internal/testsupport/testsize"
)

// syncBuffer is a log destination safe for concurrent writers.
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

// publishBlobs publishes n small blob events with distinct ids.
func publishBlobs(ctx context.Context, t *testing.T, bus *Bus, from, n int) {
	t.Helper()
	pub := bus.NewPublisher(64)
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("blob-%06d", i)
		env, err := events.EnvelopeFor(bus.Prefix(), "issue", &events.BlobRecord{FileID: id, BlobData: []byte(id), Size: int64(len(id))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// countMessages reads the whole stream message by message from its
// leader (no consumer, so no meta leader is needed), riding through
// elections, and fails on a message id seen twice.
func countMessages(ctx context.Context, t *testing.T, bus *Bus) int {
	t.Helper()
	info, err := Call(ctx, bus, "stream info", func(ctx context.Context) (*jetstream.StreamInfo, error) { return bus.Stream.Info(ctx) })
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := Call(ctx, bus, "get message", func(ctx context.Context) (*jetstream.RawStreamMsg, error) { return bus.Stream.GetMsg(ctx, seq) })
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		id := m.Header.Get(events.HeaderMsgID)
		if seen[id] {
			t.Errorf("message id %s twice in the stream", id)
		}
		seen[id] = true
	}
	return len(seen)
}

// TestOpenRidesThroughLeaderLoss: with the stream leader's server just
// killed, Open waits for the cluster to elect new leaders (saying so in
// the log) instead of failing with a timeout, and publishes go on.
func TestOpenRidesThroughLeaderLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := natscluster.Start(t, 3)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := Open(ctx, Config{URL: c.URLs(), Replicas: 3}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	publishBlobs(ctx, t, first, 0, 200)
	first.Close()

	leader, err := c.Leader(ctx, "SPECSTAR")
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(leader)
	var logs syncBuffer
	bus, err := Open(ctx, Config{URL: c.URLs(), Replicas: 3, Given: map[string]bool{"replicas": true}}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("Open with the stream leader's server down: %v\nlog:\n%s", err, logs.String())
	}
	defer bus.Close()
	publishBlobs(ctx, t, bus, 200, 200)
	c.Restart(leader)
	if n := countMessages(ctx, t, bus); n != 400 {
		t.Errorf("stream holds %d messages, want 400", n)
	}
	t.Logf("log of the Open during the election:\n%s", logs.String())
}

// TestEmptyNodeCatchesUp: a node stopped, its store wiped and started
// again catches up with the stream (its own copy, read from its
// monitoring endpoint, reaches the same last sequence), and once it has,
// the stream is served with it in the quorum.
func TestEmptyNodeCatchesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := testsize.Of(2000, 50000)
	c := natscluster.Start(t, 3)
	bus, err := Open(ctx, Config{URL: c.URLs(), Replicas: 3}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	publishBlobs(ctx, t, bus, 0, n)

	wiped, err := c.Leader(ctx, "SPECSTAR")
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(wiped)
	c.Wipe(wiped)
	c.Restart(wiped)
	start := time.Now()
	for {
		st, ok, err := c.Local(ctx, wiped, "SPECSTAR")
		if err == nil && ok && st.LastSeq == uint64(n) && st.Messages == uint64(n) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node %s did not catch up: holds %+v (ok %v, err %v), want %d messages", c.Nodes[wiped].Name, st, ok, err, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("node %s caught up with %d messages in %s", c.Nodes[wiped].Name, n, time.Since(start).Round(time.Millisecond))

	// Now without one of the nodes that kept their store: the stream's
	// quorum needs the wiped one.
	other := (wiped + 1) % 3
	c.Kill(other)
	if got := countMessages(ctx, t, bus); got != n {
		t.Errorf("with %s down, the stream serves %d messages, want %d", c.Nodes[other].Name, got, n)
	}
	c.Restart(other)
	if t.Failed() {
		for i, node := range c.Nodes {
			t.Logf("%s log tail:\n%s", node.Name, c.LogTail(i))
		}
	}
}
