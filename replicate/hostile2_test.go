package replicate_test

// Regression tests for the second hostile-input review (issue 26), beside
// the first round's in hostile_test.go.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// publishRaw publishes a meta of model with resource id rid as a hostile
// publisher could, bypassing EnvelopeFor's checks: the resource id header
// carries rid as it is. pad bytes are added to its created_by.
func publishRaw(ctx context.Context, t *testing.T, bus *stream.Bus, model, rid string, pad int) {
	t.Helper()
	base, _ := firstMetaAndRevision(t)
	m := *base
	m.ResourceID = rid
	m.CreatedBy += strings.Repeat("x", pad)
	data, err := m.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := (&events.MetaRecord{Data: data}).Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	env, err := events.EnvelopeFor(bus.Prefix(), "issue", &events.MetaRecord{Data: data}, payload)
	if err != nil {
		// Longer than EnvelopeFor allows: the headers of a short one.
		short := *base
		if env, err = events.EnvelopeFor(bus.Prefix(), "issue", &events.MetaRecord{Data: must(short.Encode(events.Msgpack))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	env.Subject = events.Subject(bus.Prefix(), model, events.KindMeta)
	env.Headers[events.HeaderModel] = model
	env.Headers[events.HeaderResourceID] = rid
	env.Headers[events.HeaderMsgID] = "raw-" + events.SubjectToken(model) + "-" + events.SubjectToken(rid[:min(len(rid), 64)])
	env.Payload = payload
	pub := bus.NewPublisher(1)
	if err := pub.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// drainInto runs a worker over the stream into a disk sink at dir until
// drained, failing the test if it does not end within the context's time.
func drainInto(ctx context.Context, t *testing.T, bus *stream.Bus, dir, name string) *replicate.Worker {
	t.Helper()
	snk, err := sink.Open(ctx, "disk:"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	w, err := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatalf("worker did not drain the stream: %v", err)
	}
	return w
}

// TestHostileIDIsDeadLetteredWithinLimits (issue 26, item 2): a meta whose
// resource_id is 20 KiB of control bytes was refused as too long, but the
// reason quoted the id escaped (four times its size), so the dead letter's
// headers exceeded JetStream's 64 KiB and its publish was retried forever:
// the worker never drained. It must be dead-lettered, its reason and the
// copied headers bounded and marked as cut.
func TestHostileIDIsDeadLetteredWithinLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	rid := strings.Repeat("\x01\x02\x7f", 20<<10/3)
	publishRaw(ctx, t, bus, "issue", rid, 0)

	w := drainInto(ctx, t, bus, t.TempDir(), "hostile")
	if st := w.Stats(); st.DeadLettered != 1 {
		t.Fatalf("stats %+v: the meta must be dead-lettered", st)
	}
	n := 0
	for dl, err := range replicate.DeadLetters(ctx, bus, "hostile") {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if len(dl.Reason) > 2048 || !strings.Contains(dl.Reason, "bytes") {
			t.Errorf("reason of %d bytes, want a bounded one saying the id's size: %.200q", len(dl.Reason), dl.Reason)
		}
		if len(dl.ResourceID) > 4096 {
			t.Errorf("the resource id header copied whole (%d bytes)", len(dl.ResourceID))
		}
		if cut := dl.Header.Get("Specstar-Dlq-Cut"); !strings.Contains(cut, events.HeaderResourceID) {
			t.Errorf("Specstar-Dlq-Cut = %q, want it to name %s", cut, events.HeaderResourceID)
		}
	}
	if n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}

// TestNamesNotUTF8AreDeadLettered (issue 26, item 6): model "bad\xff\xfe"
// and resource "r\xc3", which SpecStar (whose names are Python str) could
// not have written, were written into JSON files that neither SpecStar nor
// our reader could decode, and mirror reported success. Every sink must
// dead-letter them; the worker checks, so nothing reaches the sink.
func TestNamesNotUTF8AreDeadLettered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	publishRaw(ctx, t, bus, "bad\xff\xfe", "issue:1", 0)
	publishRaw(ctx, t, bus, "issue", "r\xc3", 0)

	dir := t.TempDir()
	w := drainInto(ctx, t, bus, dir, "utf8")
	if st := w.Stats(); st.DeadLettered != 2 || st.Applied != 2 {
		t.Fatalf("stats %+v: both metas must be dead-lettered", st)
	}
	for dl, err := range replicate.DeadLetters(ctx, bus, "utf8") {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(dl.Reason, "not valid UTF-8") {
			t.Errorf("reason %q, want it to say the name is not UTF-8", dl.Reason)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bad\xff\xfe")); err == nil {
		t.Error("model bad\\xff\\xfe written to the sink")
	}
	if _, err := os.Stat(filepath.Join(dir, "issue", "meta", "r\xc3.data")); err == nil {
		t.Error("resource r\\xc3 written to the sink")
	}
}

// must is v, panicking on err (for encodings that cannot fail).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestDeadLetterTheServerRefusesIsKeptWithoutPayload (issue 26, item 2):
// a dead-letter publish the server refuses for good (here the
// dead-letter stream's own message size limit) was retried forever, so
// the worker never acked the batch. It must be stored without its
// payload, saying so, and the worker must move on.
func TestDeadLetterTheServerRefusesIsKeptWithoutPayload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	s, err := bus.JS.Stream(ctx, bus.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgSize = 4 << 10 // smaller than the meta's payload, larger than its headers
	if _, err := bus.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	publishRaw(ctx, t, bus, "issue", "r\xc3", 8<<10) // dead-lettered: not UTF-8

	w := drainInto(ctx, t, bus, t.TempDir(), "small")
	if st := w.Stats(); st.DeadLettered != 1 {
		t.Fatalf("stats %+v: the meta must be dead-lettered", st)
	}
	n := 0
	for dl, err := range replicate.DeadLetters(ctx, bus, "small") {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if len(dl.Data) != 0 || !strings.Contains(dl.Header.Get("Specstar-Dlq-Cut"), "payload") || !strings.Contains(dl.Reason, "not valid UTF-8") {
			t.Errorf("dead letter with %d payload bytes, cut %q, reason %q: want it without payload, saying why", len(dl.Data), dl.Header.Get("Specstar-Dlq-Cut"), dl.Reason)
		}
	}
	if n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}
