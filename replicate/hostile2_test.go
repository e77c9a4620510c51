package replicate_test

// Regression tests for the second hostile-input review (issue 26), beside
// the first round's in hostile_test.go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
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
	return drainIntoURL(ctx, t, bus, "disk:"+dir, name)
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

// TestSharedUIDIsDeadLetteredByPostgres (issue 26, item 7): a revision
// whose uid another resource already holds was dropped silently by the
// Postgres sink (it decides at Flush, where nothing was dead-lettered):
// 0 dead letters, and the user never learned of it. Now it is
// dead-lettered naming both resources, and the first holder's revision
// stays as it was; checked with the holder in an earlier batch and in
// the same one.
func TestSharedUIDIsDeadLetteredByPostgres(t *testing.T) {
	for _, sameBatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("same-batch=%v", sameBatch), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer bus.Close()
			const uid = "eeeeeeee-0000-4000-8000-000000000001"
			url := postgresSinkURL(t)
			publishRevision(ctx, t, bus, "victim", uid, "2024-05-01T00:00:00Z")
			if !sameBatch {
				drainIntoURL(ctx, t, bus, url, "pg-uid")
			}
			publishRevision(ctx, t, bus, "evil", uid, "2024-06-01T00:00:00Z")
			w := drainIntoURL(ctx, t, bus, url, "pg-uid")
			if st := w.Stats(); st.DeadLettered != 1 {
				t.Fatalf("stats %+v: the second holder of uid %s must be dead-lettered", st, uid)
			}
			// In one batch as across batches, the earlier holder on the
			// stream keeps the uid (issue 33, item 4).
			var refused []string
			for dl, err := range replicate.DeadLetters(ctx, bus, "pg-uid") {
				if err != nil {
					t.Fatal(err)
				}
				refused = append(refused, dl.ResourceID)
				if !strings.Contains(dl.Reason, `"victim"`) || !strings.Contains(dl.Reason, `"evil"`) {
					t.Errorf("dead letter of %q with reason %q: want it naming both resources", dl.ResourceID, dl.Reason)
				}
			}
			if len(refused) != 1 || refused[0] != "evil" {
				t.Fatalf("dead letters of %q, want evil's alone", refused)
			}
			holder := "victim"
			snk, err := sink.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer snk.Close()
			rd := snk.(sink.Reader)
			info, data, err := rd.Revision(ctx, "issue", holder, holder+":1", events.Null[string]())
			if err != nil || info.ResourceID != holder || string(data) != `{"who":"`+holder+`"}` {
				t.Fatalf("the holder's revision reads back as %+v %q %v", info, data, err)
			}
			if _, _, err := rd.Revision(ctx, "issue", refused[0], refused[0]+":1", events.Null[string]()); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused revision reads back as %v, want fs.ErrNotExist", err)
			}
		})
	}
}

// publishRevision publishes revision <rid>:1 of model issue with uid,
// whose payload names rid.
func publishRevision(ctx context.Context, t *testing.T, bus *stream.Bus, rid, uid, updated string) {
	t.Helper()
	publishRevisionOf(ctx, t, bus, rid, uid, updated, `{"who":"`+rid+`"}`)
}

// publishRevisionOf publishes revision <rid>:1 of model issue with uid
// and this payload.
func publishRevisionOf(ctx context.Context, t *testing.T, bus *stream.Bus, rid, uid, updated, raw string) {
	t.Helper()
	publishRevisionWith(ctx, t, bus, rid, uid, updated, raw, func(map[string]string) {})
}

// publishRevisionWith is publishRevisionOf with the event's headers
// changed by edit before it is published, as a hostile or broken
// publisher would.
func publishRevisionWith(ctx context.Context, t *testing.T, bus *stream.Bus, rid, uid, updated, raw string, edit func(h map[string]string)) {
	t.Helper()
	data := []byte(raw)
	at, err := events.ParseTime(updated)
	if err != nil {
		t.Fatal(err)
	}
	res := &events.RawResource{
		Info: events.RevisionInfo{
			UID: uid, ResourceID: rid, RevisionID: rid + ":1",
			ParentRevisionID: events.Null[string](), SchemaVersion: events.Null[string](),
			DataHash: events.Some(dedup.DataHash(data)), Status: "stable",
			CreatedTime: at, UpdatedTime: at, CreatedBy: "alice", UpdatedBy: "alice",
		},
		RawData: data,
	}
	enc, err := res.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	rec := &events.RevisionRecord{Data: enc}
	payload, err := rec.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	env, err := events.EnvelopeFor(bus.Prefix(), "issue", rec, payload)
	if err != nil {
		t.Fatal(err)
	}
	edit(env.Headers)
	pub := bus.NewPublisher(1)
	if err := pub.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// postgresSinkURL is a Postgres sink (metas and revisions) of a fresh
// table prefix on the shared test server, dropped when the test ends.
func postgresSinkURL(t *testing.T) string {
	t.Helper()
	dsn := pgtest.SharedDSN()
	if conn, err := pgx.Connect(context.Background(), dsn); err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", dsn, err)
	} else {
		conn.Close(context.Background())
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "table_prefix=" + pgtest.Prefix(t) + "&revisions=true"
}

// drainIntoURL runs a worker over the stream into the sink at url until
// drained, failing the test if it does not end within the context's time.
func drainIntoURL(ctx context.Context, t *testing.T, bus *stream.Bus, url, name string) *replicate.Worker {
	t.Helper()
	snk, err := sink.Open(ctx, url)
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
