package layered_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/layered"
)

// queuedMetas is a meta store that, like the Postgres sink, only queues a
// purge (saying Written) and decides it at Flush, and reads back what it
// holds.
type queuedMetas struct {
	updated map[string]time.Time
}

func (q *queuedMetas) ApplyMeta(context.Context, string, *events.ResourceMeta) (sink.Outcome, error) {
	return sink.Written, nil
}
func (q *queuedMetas) ApplyRevision(context.Context, string, *events.RawResource) (sink.Outcome, error) {
	return sink.Skipped, nil
}
func (q *queuedMetas) ApplyBlob(context.Context, string, int64, string, io.Reader) (sink.Outcome, error) {
	return sink.Skipped, nil
}
func (q *queuedMetas) ApplyPurge(context.Context, string, string, events.Time) (sink.Outcome, error) {
	return sink.Written, nil
}
func (q *queuedMetas) Flush(context.Context) error { return nil }
func (q *queuedMetas) Close() error                { return nil }
func (q *queuedMetas) Meta(_ context.Context, model, rid string) (*events.ResourceMeta, error) {
	u, ok := q.updated[rid]
	if !ok {
		return nil, fmt.Errorf("no meta %s: %w", rid, fs.ErrNotExist)
	}
	return &events.ResourceMeta{ResourceID: rid, UpdatedTime: events.Time{Time: u}}, nil
}
func (q *queuedMetas) Revision(context.Context, string, string, string, events.Opt[string]) (*events.RevisionInfo, []byte, error) {
	return nil, nil, fs.ErrNotExist
}
func (q *queuedMetas) OpenBlob(context.Context, string) (*events.Binary, io.ReadCloser, error) {
	return nil, nil, fs.ErrNotExist
}

// purgeCounter is a resource store counting the purges that reach it.
type purgeCounter struct {
	queuedMetas
	purges int
}

func (p *purgeCounter) ApplyPurge(context.Context, string, string, events.Time) (sink.Outcome, error) {
	p.purges++
	return sink.Written, nil
}

// TestPurgeOlderThanQueuedMeta: a purge older than the stored meta leaves
// the revisions alone even when the meta store only queues (regression:
// with Postgres metas, such a purge removed the revisions of a re-created
// resource while its meta stayed).
func TestPurgeOlderThanQueuedMeta(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	metas := &queuedMetas{updated: map[string]time.Time{"r1": t0}}
	res := &purgeCounter{}
	l := layered.New("test", metas, res, res)

	if out, err := l.ApplyPurge(ctx, "m", "r1", events.Time{Time: t0.Add(-time.Second)}); err != nil || out != sink.Stale {
		t.Errorf("purge older than the meta: %v, %v; want stale", out, err)
	}
	if res.purges != 0 {
		t.Errorf("the resource store was purged %d times, want none", res.purges)
	}
	for _, rid := range []string{"r1", "absent"} {
		if out, err := l.ApplyPurge(ctx, "m", rid, events.Time{Time: t0.Add(time.Hour)}); err != nil || out != sink.Written {
			t.Errorf("purge of %s after its meta: %v, %v; want written", rid, out, err)
		}
	}
	if res.purges != 2 {
		t.Errorf("the resource store was purged %d times, want 2", res.purges)
	}
}
