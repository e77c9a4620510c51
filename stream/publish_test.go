package stream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/specstar/replicator/events"
)

// TestAsyncAckWaitCountsFromPublish: publishes whose acknowledgements
// were lost together (a stream leader that died with them) are published
// again together, each one ack wait after it was sent, not one ack wait
// after another (fc42850: eight lost acks used to cost eight waits).
func TestAsyncAckWaitCountsFromPublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := Open(ctx, Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	// A subject no stream holds, served by a plain subscriber that drops
	// each message's first publish unanswered and acknowledges the next,
	// as a new stream leader would.
	var mu sync.Mutex
	seen := map[string]int{}
	var again []time.Time
	sub, err := bus.NC.Subscribe("lost.>", func(m *nats.Msg) {
		id := m.Header.Get(events.HeaderMsgID)
		mu.Lock()
		seen[id]++
		n := seen[id]
		if n > 1 {
			again = append(again, time.Now())
		}
		mu.Unlock()
		if n > 1 {
			_ = m.Respond([]byte(`{"stream":"LOST","seq":1}`))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := bus.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	const lost = 5
	p := bus.NewPublisher(64)
	p.ackWait = 400 * time.Millisecond
	for i := range lost {
		env := &events.Envelope{Subject: fmt.Sprintf("lost.%d", i), Headers: map[string]string{events.HeaderMsgID: fmt.Sprintf("id-%d", i)}, Payload: []byte("x")}
		if err := p.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(again) != lost || p.Stats.Published != lost {
		t.Fatalf("%d published again, %d acknowledged; want %d each", len(again), p.Stats.Published, lost)
	}
	if spread := again[lost-1].Sub(again[0]); spread >= p.ackWait {
		t.Errorf("the %d lost publishes were sent again over %v, one ack wait (%v) after another", lost, spread, p.ackWait)
	}
}

// TestAckedPublishNotSentAgainAfterAckWait: messages acknowledged at
// once but reaped only after the ack wait (the Redis tail's last
// snapshot events, flushed when the next change came more than 10 s
// later) are not published again (issue 26, item 12: about half of
// them were, select picking the expired timer over the ack).
func TestAckedPublishNotSentAgainAfterAckWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := Open(ctx, Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	var mu sync.Mutex
	seen := map[string]int{}
	sub, err := bus.NC.Subscribe("acked.>", func(m *nats.Msg) {
		mu.Lock()
		seen[m.Header.Get(events.HeaderMsgID)]++
		mu.Unlock()
		_ = m.Respond([]byte(`{"stream":"ACKED","seq":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := bus.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	const n = 40
	p := bus.NewPublisher(64)
	p.ackWait = 200 * time.Millisecond
	for i := range n {
		env := &events.Envelope{Subject: fmt.Sprintf("acked.%d", i), Headers: map[string]string{events.HeaderMsgID: fmt.Sprintf("id-%d", i)}, Payload: []byte("x")}
		if err := p.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	sent := time.Now()
	// Every message answered, and the ack wait of every one run out.
	for {
		mu.Lock()
		answered := len(seen)
		mu.Unlock()
		if answered == n && time.Since(sent) > 2*p.ackWait {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d messages answered", answered, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s published %d times; want once", id, k)
		}
	}
	if p.Stats.Published != n {
		t.Errorf("%d acknowledged; want %d", p.Stats.Published, n)
	}
}
