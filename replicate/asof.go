package replicate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
)

// asOfTracker remembers, for a restore with Force into a sink that was
// not empty, the newest meta the stream's events up to the point gave
// each resource (by the newer-meta-wins order, without the byte
// tie-break), so that afterwards a sink still holding a later state can be
// told apart from one that holds the state as of the point: newer metas
// win, so restoring an earlier point over a later state changes nothing
// the later state wrote.
type asOfTracker struct {
	mu  sync.Mutex
	res map[string]*asOfMeta // model "\x00" resource id
}

// asOfMeta is the newest meta seen (set false: only purges were seen).
type asOfMeta struct {
	set     bool
	updated time.Time
	count   int64
}

func newAsOfTracker() *asOfTracker { return &asOfTracker{res: map[string]*asOfMeta{}} }

func asOfKey(model, rid string) string { return model + "\x00" + rid }

// meta notes a meta event applied (in any order: the newest is kept).
func (t *asOfTracker) meta(model string, m *events.ResourceMeta) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := asOfKey(model, m.ResourceID)
	cur := t.res[k]
	if cur == nil {
		cur = &asOfMeta{}
		t.res[k] = cur
	}
	u := m.UpdatedTime.Instant()
	if !cur.set || u.After(cur.updated) || u.Equal(cur.updated) && m.TotalRevisionCount > cur.count {
		cur.set, cur.updated, cur.count = true, u, m.TotalRevisionCount
	}
}

// purge notes a purge event applied: the resource is one the stream
// wrote, whose state as of the point may be that it is gone.
func (t *asOfTracker) purge(model, rid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := asOfKey(model, rid); t.res[k] == nil {
		t.res[k] = &asOfMeta{}
	}
}

// newer reports whether m, held by the sink, is newer than any meta the
// stream's events up to the point gave its resource.
func (a *asOfMeta) newer(m *events.ResourceMeta) bool {
	if !a.set {
		return true // only purged up to the point, yet held
	}
	u := m.UpdatedTime.Instant()
	return u.After(a.updated) || u.Equal(a.updated) && m.TotalRevisionCount > a.count
}

// LaterStateError is a restore with Force into a sink that, once every
// event up to the point is applied, still holds what no event up to it
// wrote: metas newer than the point's (newer metas win, so they stay) or
// resources the stream had not written by then. The sink then holds a
// later state (or another deployment's), not the state as of the point.
type LaterStateError struct {
	Sink           string
	Point          Point
	Newer, Foreign int    // resources with a newer meta; resources no event up to the point wrote
	NewerExample   string // model/resource of one of each, for the message
	ForeignExample string
}

func (e *LaterStateError) Error() string {
	var what string
	switch {
	case e.Newer > 0 && e.Foreign > 0:
		what = fmt.Sprintf("%d resources with a meta newer than the stream's events up to it gave them (%s) and %d that no event up to it wrote (%s)", e.Newer, e.NewerExample, e.Foreign, e.ForeignExample)
	case e.Newer > 0:
		what = fmt.Sprintf("%d resources with a meta newer than the stream's events up to it gave them (%s)", e.Newer, e.NewerExample)
	default:
		what = fmt.Sprintf("%d resources that no event up to it wrote (%s)", e.Foreign, e.ForeignExample)
	}
	return fmt.Sprintf("sink %s does not hold the state as of sequence %d (stored %s): it still holds %s, because newer metas win; --force only resumes a restore into the same sink at the same point or moves it to a later one: restore an earlier point into an empty sink",
		e.Sink, e.Point.Seq, e.Point.Time.UTC().Format(time.RFC3339Nano), what)
}

// Permanent says no retry changes it (the command's exit status 1).
func (e *LaterStateError) Permanent() bool { return true }

// check reads every resource the sink holds (of models; nil: all) and
// returns a LaterStateError when one is newer than the point's or was not
// written up to it. A sink that cannot be listed and read back is not
// checked (ok false).
func (t *asOfTracker) check(ctx context.Context, snk sink.Sink, models []string, display string, point Point) (ok bool, err error) {
	ls, isLister := snk.(sink.Lister)
	rd, isReader := snk.(sink.Reader)
	if !isLister || !isReader {
		return false, nil
	}
	if models == nil {
		if models, err = ls.Models(ctx); err != nil {
			return false, fmt.Errorf("sink %s: list models: %w", display, err)
		}
	}
	le := &LaterStateError{Sink: display, Point: point}
	for _, model := range models {
		for rid, err := range ls.ResourceIDs(ctx, model) {
			if err != nil {
				return false, fmt.Errorf("sink %s: list resources of model %q: %w", display, model, err)
			}
			a := t.res[asOfKey(model, rid)]
			if a == nil {
				if le.Foreign++; le.ForeignExample == "" {
					le.ForeignExample = model + "/" + rid
				}
				continue
			}
			m, err := rd.Meta(ctx, model, rid)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("sink %s: read meta %s/%s: %w", display, model, rid, err)
			}
			if a.newer(m) {
				if le.Newer++; le.NewerExample == "" {
					le.NewerExample = model + "/" + rid
				}
			}
		}
	}
	if le.Newer > 0 || le.Foreign > 0 {
		return true, le
	}
	return true, nil
}
