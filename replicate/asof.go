package replicate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
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
//
// It also remembers every revision and blob the events wrote, so that
// revisions and blobs the sink holds beyond them (a killed restore to a
// later point leaves revisions whose metas it never wrote; another
// deployment's tree holds its own) are found too: newer metas win, but
// an extra revision or blob is simply left where it is.
type asOfTracker struct {
	mu    sync.Mutex
	res   map[string]*asOfMeta // model "\x00" resource id
	revs  map[string]struct{}  // revKey: model, resource id, revision id, schema directory
	blobs map[string]struct{}  // file ids
}

// asOfMeta is the newest meta seen (set false: only purges were seen).
type asOfMeta struct {
	set     bool
	updated time.Time
	count   int64
}

func newAsOfTracker() *asOfTracker {
	return &asOfTracker{res: map[string]*asOfMeta{}, revs: map[string]struct{}{}, blobs: map[string]struct{}{}}
}

func asOfKey(model, rid string) string { return model + "\x00" + rid }

// revKey identifies a revision's index entry (model "" for a store
// shared by all models); None and UNSET schema versions are one entry.
func revKey(model, rid, revisionID string, sv events.Opt[string]) string {
	dir := "no_ver"
	if sv.IsSet() {
		dir = "v_" + sv.Value
	}
	return model + "\x00" + rid + "\x00" + revisionID + "\x00" + dir
}

// revision notes a revision event applied.
func (t *asOfTracker) revision(model string, info *events.RevisionInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.revs[revKey(model, info.ResourceID, info.RevisionID, info.SchemaVersion)] = struct{}{}
}

// blob notes a blob event applied.
func (t *asOfTracker) blob(fileID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.blobs[fileID] = struct{}{}
}

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
// wrote: metas newer than the point's (newer metas win, so they stay),
// resources, revisions or blobs the stream had not written by then. The
// sink then holds a later state (or another deployment's), not the state
// as of the point.
type LaterStateError struct {
	Sink  string
	Point Point
	// Resources with a newer meta; resources, revisions and blobs no event
	// up to the point wrote.
	Newer, Foreign, Revisions, Blobs int
	// One of each (model/resource, model/resource revision id, file id),
	// for the message.
	NewerExample, ForeignExample, RevisionExample, BlobExample string
}

func (e *LaterStateError) Error() string {
	var what []string
	if e.Newer > 0 {
		what = append(what, fmt.Sprintf("%d resources with a meta newer than the stream's events up to it gave them (%s)", e.Newer, e.NewerExample))
	}
	if e.Foreign > 0 {
		what = append(what, fmt.Sprintf("%d resources that no event up to it wrote (%s)", e.Foreign, e.ForeignExample))
	}
	if e.Revisions > 0 {
		what = append(what, fmt.Sprintf("%d revisions that no event up to it wrote (%s)", e.Revisions, e.RevisionExample))
	}
	if e.Blobs > 0 {
		what = append(what, fmt.Sprintf("%d blobs that no event up to it wrote (%s)", e.Blobs, e.BlobExample))
	}
	return fmt.Sprintf("sink %s does not hold the state as of sequence %d (stored %s): it still holds %s, because newer metas win and a restore removes nothing; --force only resumes a restore into the same sink at the same point or moves it to a later one: restore an earlier point into an empty sink",
		e.Sink, e.Point.Seq, e.Point.Time.UTC().Format(time.RFC3339Nano), strings.Join(what, ", "))
}

// Permanent says no retry changes it (the command's exit status 1).
func (e *LaterStateError) Permanent() bool { return true }

func (e *LaterStateError) found() bool { return e.Newer+e.Foreign+e.Revisions+e.Blobs > 0 }

// check reads every resource the sink holds (of models; nil: all), and
// lists its revisions and blobs where it can, and returns a
// LaterStateError when a meta is newer than the point's, or a resource,
// revision or blob was not written up to it. What the sink cannot list
// is not checked; ok is false when nothing could be.
func (t *asOfTracker) check(ctx context.Context, snk sink.Sink, models []string, display string, point Point) (ok bool, err error) {
	le := &LaterStateError{Sink: display, Point: point}
	// With models=, a store shared by all models is checked only for the
	// resources of those models: the ones the events or the metas name.
	var ofModels map[string]bool
	if models != nil {
		ofModels = map[string]bool{}
		for k := range t.res {
			ofModels[k[strings.IndexByte(k, 0)+1:]] = true
		}
	}
	metas, err := t.checkMetas(ctx, snk, models, le, ofModels)
	if err != nil {
		return false, err
	}
	revs, err := t.checkRevisions(ctx, snk, models, le, ofModels)
	if err != nil {
		return false, fmt.Errorf("sink %s: %w", display, err)
	}
	blobs := false
	if models == nil { // blobs are shared by all models
		if blobs, err = t.checkBlobs(ctx, snk, le); err != nil {
			return false, fmt.Errorf("sink %s: %w", display, err)
		}
	}
	if le.found() {
		return true, le
	}
	return metas || revs || blobs, nil
}

// checkMetas is check's part for the metas (false: the sink cannot be
// listed and read back); ofModels, when not nil, gets every resource id
// listed.
func (t *asOfTracker) checkMetas(ctx context.Context, snk sink.Sink, models []string, le *LaterStateError, ofModels map[string]bool) (bool, error) {
	ls, isLister := snk.(sink.Lister)
	rd, isReader := snk.(sink.Reader)
	if !isLister || !isReader {
		return false, nil
	}
	if models == nil {
		var err error
		if models, err = ls.Models(ctx); err != nil {
			return false, fmt.Errorf("sink %s: list models: %w", le.Sink, err)
		}
	}
	for _, model := range models {
		for rid, err := range ls.ResourceIDs(ctx, model) {
			if err != nil {
				return false, fmt.Errorf("sink %s: list resources of model %q: %w", le.Sink, model, err)
			}
			if ofModels != nil {
				ofModels[rid] = true
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
				return false, fmt.Errorf("sink %s: read meta %s/%s: %w", le.Sink, model, rid, err)
			}
			if a.newer(m) {
				if le.Newer++; le.NewerExample == "" {
					le.NewerExample = model + "/" + rid
				}
			}
		}
	}
	return true, nil
}

// checkRevisions is check's part for the revisions (false: the sink
// cannot list them).
func (t *asOfTracker) checkRevisions(ctx context.Context, snk sink.Sink, models []string, le *LaterStateError, ofModels map[string]bool) (bool, error) {
	rl, ok := snk.(sink.RevisionLister)
	if !ok {
		return false, nil
	}
	var shared map[string]struct{} // revs without their model, built at the first revision of a shared store
	for ref, err := range rl.AllRevisions(ctx) {
		if errors.Is(err, errors.ErrUnsupported) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("list revisions: %w", err)
		}
		var wrote bool
		if ref.Model == "" {
			if ofModels != nil && !ofModels[ref.ResourceID] {
				continue // another model's, maybe
			}
			if shared == nil {
				shared = map[string]struct{}{}
				for k := range t.revs {
					shared[k[strings.IndexByte(k, 0):]] = struct{}{}
				}
			}
			_, wrote = shared[revKey("", ref.ResourceID, ref.RevisionID, ref.SchemaVersion)]
		} else {
			if models != nil && !slices.Contains(models, ref.Model) {
				continue
			}
			_, wrote = t.revs[revKey(ref.Model, ref.ResourceID, ref.RevisionID, ref.SchemaVersion)]
		}
		if !wrote {
			if le.Revisions++; le.RevisionExample == "" {
				le.RevisionExample = ref.String()
			}
		}
	}
	return true, nil
}

// checkBlobs is check's part for the blobs (false: the sink cannot list
// them).
func (t *asOfTracker) checkBlobs(ctx context.Context, snk sink.Sink, le *LaterStateError) (bool, error) {
	bl, ok := snk.(sink.BlobLister)
	if !ok {
		return false, nil
	}
	for id, err := range bl.BlobIDs(ctx) {
		if errors.Is(err, errors.ErrUnsupported) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("list blobs: %w", err)
		}
		if _, wrote := t.blobs[id]; !wrote {
			if le.Blobs++; le.BlobExample == "" {
				le.BlobExample = "blob " + id
			}
		}
	}
	return true, nil
}
