package replicate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// TestSharedUIDFirstInStreamKeepsIt (issue 33, item 4): two resources
// whose revisions share one uid, victim first on the stream, replayed
// into fresh sinks gave the uid to whichever the parallel apply of one
// batch happened to run first (disk: evil 8 of 8, S3 and Postgres: either
// one), so replicas of one stream disagreed. Whatever the batch size and
// the parallelism, every sink must keep the uid for victim, the first
// holder in stream order, and dead-letter evil naming both.
func TestSharedUIDFirstInStreamKeepsIt(t *testing.T) {
	srv := s3test.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	buckets := 0
	sinks := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"disk", func(t *testing.T) string { return "disk:" + t.TempDir() }},
		{"s3", func(t *testing.T) string {
			buckets++
			bucket := fmt.Sprintf("uid-order-%d", buckets)
			srv.CreateBucket(t, bucket)
			return "s3://" + bucket + "/?endpoint=" + url.QueryEscape(srv.Endpoint) + "&region=" + srv.Region + "&path_style=true"
		}},
		{"postgres", postgresSinkURL},
	}
	type config struct{ batch, parallel int }
	for _, c := range []struct {
		name string
		// pad makes the two holders' payloads this long: over the
		// server's max payload they travel by reference
		// (RecordRefRecord), their uid read from the object store.
		pad        int
		maxPayload int32
		configs    []config
	}{
		{"inline", 0, 0, []config{{1, 1}, {2, 16}, {4, 2}, {8, 16}, {256, 1}, {256, 16}}},
		{"by-reference", 320 << 10, 256 << 10, []config{{1, 1}, {8, 16}, {256, 16}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir(), MaxPayload: c.maxPayload}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer bus.Close()
			const uid = "eeeeeeee-0000-4000-8000-000000000033"
			payload := func(rid string) string {
				if c.pad == 0 {
					return `{"who":"` + rid + `"}`
				}
				return `{"who":"` + rid + `","pad":"` + strings.Repeat("x", c.pad) + `"}`
			}
			// Other resources around the two, so that batches of every
			// size cut the stream in different places.
			for i := range 3 {
				publishRevision(ctx, t, bus, fmt.Sprintf("before%d", i), fmt.Sprintf("eeeeeeee-0000-4000-8000-1000000000%02d", i), "2024-05-01T00:00:00Z")
			}
			publishRevisionOf(ctx, t, bus, "victim", uid, "2024-05-01T00:00:00Z", payload("victim"))
			for i := range 3 {
				publishRevision(ctx, t, bus, fmt.Sprintf("between%d", i), fmt.Sprintf("eeeeeeee-0000-4000-8000-2000000000%02d", i), "2024-05-01T00:00:00Z")
			}
			// Newer, so that a newer-wins rule for one uid would pick it.
			publishRevisionOf(ctx, t, bus, "evil", uid, "2024-06-01T00:00:00Z", payload("evil"))
			publishRevision(ctx, t, bus, "after", "eeeeeeee-0000-4000-8000-300000000000", "2024-05-01T00:00:00Z")
			for _, s := range sinks {
				for _, cf := range c.configs {
					t.Run(fmt.Sprintf("%s/batch=%d/parallel=%d", s.name, cf.batch, cf.parallel), func(t *testing.T) {
						name := fmt.Sprintf("uid-%s-%s-%d-%d", c.name, s.name, cf.batch, cf.parallel)
						snk, err := sink.Open(ctx, s.url(t))
						if err != nil {
							t.Fatal(err)
						}
						defer snk.Close()
						cfg := replicate.DefaultConfig()
						cfg.UntilDrained = true
						cfg.Batch, cfg.MaxBatch, cfg.Parallel = cf.batch, cf.batch, cf.parallel
						w, err := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
						if err != nil {
							t.Fatal(err)
						}
						if err := w.Run(ctx); err != nil {
							t.Fatalf("worker did not drain the stream: %v", err)
						}
						var refused []string
						for dl, err := range replicate.DeadLetters(ctx, bus, name) {
							if err != nil {
								t.Fatal(err)
							}
							refused = append(refused, dl.ResourceID)
							if !strings.Contains(dl.Reason, `"victim"`) || !strings.Contains(dl.Reason, `"evil"`) {
								t.Errorf("dead letter of %q with reason %q: want it naming both resources", dl.ResourceID, dl.Reason)
							}
						}
						if len(refused) != 1 || refused[0] != "evil" {
							t.Fatalf("dead letters of %q, want evil's alone (victim is first on the stream)", refused)
						}
						rd := snk.(sink.Reader)
						info, data, err := rd.Revision(ctx, "issue", "victim", "victim:1", events.Null[string]())
						if err != nil || info.ResourceID != "victim" || string(data) != payload("victim") {
							t.Fatalf("victim's revision reads back as %+v, %d bytes, %v", info, len(data), err)
						}
						if _, _, err := rd.Revision(ctx, "issue", "evil", "evil:1", events.Null[string]()); !errors.Is(err, fs.ErrNotExist) {
							t.Errorf("evil's revision reads back as %v, want fs.ErrNotExist", err)
						}
					})
				}
			}
		})
	}
}
