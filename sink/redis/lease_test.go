package redis_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/redistest"
	"github.com/specstar/replicator/sink/internal/lease"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/redis"
)

// TestRestoreLease (issue 33 item 3): writers of one prefix share it, a
// restore (Exclusive) holds it alone: refused while another process
// writes there, and a writer's writes (queued or not) refused while it
// holds it, each refusal naming the holder; readers are never refused;
// closing the restore frees the prefix, and what was queued meanwhile is
// written then.
func TestRestoreLease(t *testing.T) {
	prefix := redistest.Prefix(t) + redis.ModelPlaceholder + ":"
	refused := func(err error, role string) bool {
		var he *lease.HeldError
		return errors.As(err, &he) && he.Holder.Role == role && strings.Contains(err.Error(), "redis")
	}
	meta := func(n int64) *events.ResourceMeta {
		return sinktestutil.Meta(t, "r1", "2025-01-01T00:00:00", n, "u")
	}
	w1, w2 := openStore(t, prefix, events.JSON), openStore(t, prefix, events.JSON)
	reader := openStore(t, prefix, events.JSON)
	for i, w := range []*redis.Sink{w1, w2} {
		if _, err := w.Put(ctx, "issue", meta(int64(i+1))); err != nil {
			t.Fatalf("two writers of one prefix: %v, want both to write", err)
		}
	}
	if err := w1.Exclusive(ctx); !refused(err, "writer") {
		t.Errorf("a restore's Exclusive while another writer writes the prefix: %v, want a HeldError naming the writer", err)
	}
	w2.Close()
	if err := w1.Exclusive(ctx); err != nil {
		t.Fatalf("Exclusive once the other writer closed: %v", err)
	}
	if _, err := w1.Put(ctx, "issue", meta(3)); err != nil {
		t.Errorf("the restore's own write: %v", err)
	}
	w3 := openStore(t, prefix, events.JSON)
	if _, err := w3.Put(ctx, "issue", meta(4)); !refused(err, "restore") {
		t.Errorf("a writer's Put into the prefix a restore holds: %v, want a HeldError naming the restore", err)
	}
	if _, err := w3.ApplyMeta(ctx, "issue", meta(5)); err != nil {
		t.Fatal(err)
	}
	if err := w3.Flush(ctx); !refused(err, "restore") {
		t.Errorf("a writer's Flush into the prefix a restore holds: %v, want a HeldError naming the restore", err)
	}
	if _, err := w3.Purge(ctx, "issue", "r1", sinktestutil.MustTime(t, "2030-01-01T00:00:00")); !refused(err, "restore") {
		t.Errorf("a writer's Purge in the prefix a restore holds: %v, want a HeldError naming the restore", err)
	}
	if m, err := reader.Meta(ctx, "issue", "r1"); err != nil || m.TotalRevisionCount != 3 {
		t.Errorf("a reader of the prefix a restore holds: %+v %v, want the restore's meta (count 3) read", m, err)
	}
	w1.Close()
	if err := w3.Flush(ctx); err != nil {
		t.Fatalf("the writer's Flush once the restore closed: %v", err)
	}
	if m, err := reader.Meta(ctx, "issue", "r1"); err != nil || m.TotalRevisionCount != 5 {
		t.Errorf("after the refused Flush went through: %+v %v, want the queued meta (count 5), kept while refused", m, err)
	}
}
