package replicate_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/stream"
)

// TestRefusalIsMatchedByTheEventItself (issue 33, item 5): Postgres
// refuses a shared uid only at Flush, and the worker found the refused
// revision's event by its id headers. Headers can differ from the
// payload the sink applied (the NATS client trims a trailing space from
// a header value; a publisher may send none), and then the refusal
// matched no event: the batch was acked, the revision lost without a
// dead letter. The dead letter must come whatever the headers say.
func TestRefusalIsMatchedByTheEventItself(t *testing.T) {
	const uid = "eeeeeeee-0000-4000-8000-000000000033"
	cases := []struct {
		name, rid string
		headers   func(h map[string]string)
	}{
		{"a resource id ending in a space", "zevil ", func(map[string]string) {}},
		{"no id headers", "zevil", func(h map[string]string) {
			delete(h, events.HeaderResourceID)
			delete(h, events.HeaderRevisionID)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer bus.Close()
			url := postgresSinkURL(t)
			publishRevision(ctx, t, bus, "victim", uid, "2024-05-01T00:00:00Z")
			drainIntoURL(ctx, t, bus, url, "pg-uid")
			publishRevisionWith(ctx, t, bus, tc.rid, uid, "2024-06-01T00:00:00Z", `{"who":"evil"}`, tc.headers)
			w := drainIntoURL(ctx, t, bus, url, "pg-uid")
			if st := w.Stats(); st.DeadLettered != 1 {
				t.Fatalf("stats %+v: the revision of %q that reuses victim's uid must be dead-lettered", st, tc.rid)
			}
			n := 0
			for dl, err := range replicate.DeadLetters(ctx, bus, "pg-uid") {
				if err != nil {
					t.Fatal(err)
				}
				n++
				rec, err := events.DecodeRecord(events.Msgpack, dl.Data)
				if err != nil {
					t.Fatalf("dead letter payload: %v", err)
				}
				res, err := rec.(*events.RevisionRecord).Resource()
				if err != nil || res.Info.ResourceID != tc.rid {
					t.Errorf("dead letter holds %+v (%v), want the revision of %q", res, err, tc.rid)
				}
			}
			if n != 1 {
				t.Fatalf("%d dead letters, want 1", n)
			}
		})
	}
}
