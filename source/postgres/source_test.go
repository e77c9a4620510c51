package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/postgres"
)

// The Postgres source tests run against a real server: $PG_DSN, by default
// the machine's cluster. They fail, never skip, when it cannot be reached.
// Each test writes tables of its own random prefix and drops them.

func pgTestDSN() string { return pgtest.SharedDSN() }

func randomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t_" + hex.EncodeToString(b[:]) + "_"
}

// openWriter returns a SpecStar test writer on a fresh prefix whose
// tables are dropped when the test ends.
func openWriter(t *testing.T) *specstarpg.Writer {
	t.Helper()
	ctx := context.Background()
	prefix := randomPrefix()
	w, err := specstarpg.Open(ctx, pgTestDSN(), specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgTestDSN(), err)
	}
	t.Cleanup(func() {
		if err := w.DropAll(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		w.Close()
	})
	return w
}

func openSource(t *testing.T, prefix string, opts Options) *Source {
	t.Helper()
	opts.TablePrefix = prefix
	s, err := Open(context.Background(), pgTestDSN(), opts)
	if err != nil {
		t.Fatalf("cannot open the Postgres source at %s (set PG_DSN to a reachable server): %v", pgTestDSN(), err)
	}
	t.Cleanup(s.Close)
	return s
}

func prefixOf(w *specstarpg.Writer) string {
	return w.DataTable()[:len(w.DataTable())-len("resource_data")]
}

// The expected content of a deployment the test writer populated, shared
// with the other sources' tests (internal/testsupport/specstarpg).
type (
	resource   = specstarpg.Resource
	deployment = specstarpg.Deployment
)

var (
	payload   = specstarpg.Payload
	withBlobs = specstarpg.WithBlobs
)

func populate(t *testing.T, w *specstarpg.Writer) deployment { return specstarpg.Populate(t, w) }

type emitted struct {
	model string
	rec   events.Record
	pos   Position
}

func snapshotAll(t *testing.T, s *Source, from Position) ([]emitted, SnapshotStats) {
	t.Helper()
	var out []emitted
	st, err := s.Snapshot(context.Background(), from, func(model string, rec events.Record, pos Position) error {
		out = append(out, emitted{model, rec, pos})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, st
}

func msgpackOf(t *testing.T, v interface {
	Encode(events.Encoding) ([]byte, error)
}) []byte {
	t.Helper()
	b, err := v.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkRecords checks that recs are, per model and in resource_id order,
// each resource's meta then all its revisions, exactly as written.
func checkRecords(t *testing.T, recs []emitted, want deployment) {
	t.Helper()
	var models []string
	for m := range want {
		models = append(models, m)
	}
	sort.Strings(models)
	i := 0
	for _, m := range models {
		var rids []string
		for rid := range want[m] {
			rids = append(rids, rid)
		}
		sort.Strings(rids)
		for _, rid := range rids {
			r := want[m][rid]
			if i >= len(recs) {
				t.Fatalf("snapshot ended before %s %s", m, rid)
			}
			mr, ok := recs[i].rec.(*events.MetaRecord)
			if !ok || recs[i].model != m {
				t.Fatalf("record %d: got %s of %q, want the meta of %s %s", i, recs[i].rec.Tag(), recs[i].model, m, rid)
			}
			if !bytes.Equal(mr.Data, msgpackOf(t, r.Last.Meta)) || !bytes.Equal(mr.Data, r.Last.MetaData) {
				t.Errorf("%s %s: meta bytes differ from what the writer wrote", m, rid)
			}
			i++
			for n, rev := range r.Revs {
				if i >= len(recs) {
					t.Fatalf("snapshot ended before revision %d of %s %s", n+1, m, rid)
				}
				rr, ok := recs[i].rec.(*events.RevisionRecord)
				if !ok {
					t.Fatalf("record %d: got %s, want revision %d of %s %s", i, recs[i].rec.Tag(), n+1, m, rid)
				}
				res, err := rr.Resource()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(msgpackOf(t, &res.Info), msgpackOf(t, rev.Info)) || !bytes.Equal(res.RawData, rev.Data) {
					t.Errorf("%s %s revision %d differs from what the writer wrote", m, rid, n+1)
				}
				i++
			}
			if got := recs[i-1].pos; got.Model != m || got.ResourceID != rid {
				t.Errorf("position after %s %s is %+v", m, rid, got)
			}
		}
	}
	if i != len(recs) {
		t.Errorf("%d records emitted, want %d", len(recs), i)
	}
}

// TestPostgresSnapshot: the snapshot emits exactly what the writer wrote,
// and the records applied to a Disk and to a Postgres sink read back as
// the same bytes.
func TestPostgresSnapshot(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t)
	want := populate(t, w)
	src := openSource(t, prefixOf(w), Options{Revisions: true})
	recs, st := snapshotAll(t, src, Position{})
	checkRecords(t, recs, want)
	if st.Metas != 7 || st.Revisions != 18 || len(st.Models) != 2 || st.SnapshotID == "" || st.TxSnapshot == "" {
		t.Errorf("stats %+v", st)
	}

	disk, err := disk.Open(ctx, t.TempDir(), disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	w2 := openWriter(t) // only for its prefix and the cleanup of the sink's tables
	pg, err := postgres.Open(ctx, pgTestDSN(), postgres.Options{TablePrefix: prefixOf(w2), Revisions: true})
	if err != nil {
		t.Fatalf("cannot open the Postgres sink at %s: %v", pgTestDSN(), err)
	}
	t.Cleanup(func() { pg.Close() })
	type target interface {
		ApplyMeta(context.Context, string, *events.ResourceMeta) (sink.Outcome, error)
		ApplyRevision(context.Context, string, *events.RawResource) (sink.Outcome, error)
		Flush(context.Context) error
		Meta(context.Context, string, string) (*events.ResourceMeta, error)
		Revision(context.Context, string, string, string, events.Opt[string]) (*events.RevisionInfo, []byte, error)
	}
	for name, tg := range map[string]target{"disk": disk, "postgres": pg} {
		for _, e := range recs {
			switch r := e.rec.(type) {
			case *events.MetaRecord:
				meta, err := r.Meta()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tg.ApplyMeta(ctx, e.model, meta); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			case *events.RevisionRecord:
				res, err := r.Resource()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tg.ApplyRevision(ctx, e.model, res); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
		if err := tg.Flush(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for m, rs := range want {
			for rid, r := range rs {
				meta, err := tg.Meta(ctx, m, rid)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !bytes.Equal(msgpackOf(t, meta), r.Last.MetaData) {
					t.Errorf("%s: meta of %s %s reads back differently", name, m, rid)
				}
				for _, rev := range r.Revs {
					info, data, err := tg.Revision(ctx, m, rid, rev.Info.RevisionID, rev.Info.SchemaVersion)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !bytes.Equal(msgpackOf(t, info), rev.InfoData) || !bytes.Equal(data, rev.Data) {
						t.Errorf("%s: revision %s reads back differently", name, rev.Info.RevisionID)
					}
				}
			}
		}
	}

	// Metas only, when the revisions live elsewhere.
	metasOnly := openSource(t, prefixOf(w), Options{Models: []string{"user"}})
	recs, _ = snapshotAll(t, metasOnly, Position{})
	if len(recs) != 3 {
		t.Fatalf("metas-only snapshot of user: %d records, want 3", len(recs))
	}
	for _, e := range recs {
		if _, ok := e.rec.(*events.MetaRecord); !ok || e.model != "user" {
			t.Errorf("metas-only snapshot emitted %s of %q", e.rec.Tag(), e.model)
		}
	}
}

// TestPostgresSnapshotConsistent: an update committed while the snapshot
// is running is not in it.
func TestPostgresSnapshotConsistent(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t)
	want := populate(t, w)
	src := openSource(t, prefixOf(w), Options{Revisions: true})
	issueRecords := 4 * (1 + 3)
	blocked, release := make(chan struct{}), make(chan struct{})
	var recs []emitted
	type result struct {
		st  SnapshotStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		n := 0
		st, err := src.Snapshot(ctx, Position{}, func(model string, rec events.Record, pos Position) error {
			recs = append(recs, emitted{model, rec, pos})
			n++
			if n == issueRecords {
				close(blocked)
				<-release
			}
			return nil
		})
		done <- result{st, err}
	}()
	select {
	case <-blocked:
	case r := <-done:
		t.Fatalf("snapshot ended without blocking: %v", r.err)
	}
	for _, err := range []error{
		func() error {
			_, err := w.Update(ctx, "user", "user:001", payload("changed", 9), specstarpg.Write{SchemaVersion: events.Some("1")})
			return err
		}(),
		func() error {
			_, err := w.Create(ctx, "user", "user:999", payload("new", 0), specstarpg.Write{})
			return err
		}(),
		func() error {
			_, err := w.Update(ctx, "issue", "issue:001", payload("changed", 9), specstarpg.Write{})
			return err
		}(),
	} {
		if err != nil {
			close(release)
			t.Fatal(err)
		}
	}
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.st.SnapshotID == "" {
		t.Error("no exported snapshot id")
	}
	checkRecords(t, recs, want) // the pre-update state, nothing more
}

// TestPostgresSnapshotResume: a snapshot stopped after k resources and
// resumed from its last Position emits, in the union, the full snapshot;
// only the resource at the boundary (some of whose records were handled
// before the stop) is emitted twice.
func TestPostgresSnapshotResume(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t)
	populate(t, w)
	src := openSource(t, prefixOf(w), Options{Revisions: true})
	full, fullStats := snapshotAll(t, src, Position{})
	recKey := func(e emitted) string {
		b, err := e.rec.Encode(events.Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		return e.model + "|" + string(b)
	}
	fullKeys := map[string]bool{}
	for _, e := range full {
		fullKeys[recKey(e)] = true
	}
	errStop := errors.New("stop")
	for _, k := range []int{0, 1, 3, 4, 6} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			var handled []emitted
			var last Position
			metas := 0
			_, err := src.Snapshot(ctx, Position{}, func(model string, rec events.Record, pos Position) error {
				if _, ok := rec.(*events.MetaRecord); ok {
					metas++
				} else if metas == k+1 { // the second record of resource k+1
					return errStop
				}
				handled = append(handled, emitted{model, rec, pos})
				last = pos
				return nil
			})
			if !errors.Is(err, errStop) {
				t.Fatalf("got %v, want the emit error", err)
			}
			b, err := json.Marshal(last)
			if err != nil {
				t.Fatal(err)
			}
			var from Position
			if err := json.Unmarshal(b, &from); err != nil {
				t.Fatal(err)
			}
			rest, st := snapshotAll(t, src, from)
			counts := map[string]int{}
			for _, e := range append(handled, rest...) {
				kk := recKey(e)
				if !fullKeys[kk] {
					t.Errorf("record of %s not in the full snapshot", e.model)
				}
				counts[kk]++
			}
			boundary := 0
			for _, e := range full {
				switch counts[recKey(e)] {
				case 1:
				case 2:
					boundary++
				default:
					t.Errorf("a record of %s emitted %d times", e.model, counts[recKey(e)])
				}
			}
			if boundary != 1 { // the boundary resource's meta, handled before the stop
				t.Errorf("%d records emitted twice, want exactly the boundary's meta", boundary)
			}
			cj, _ := json.Marshal(st.Cursor)
			fj, _ := json.Marshal(fullStats.Cursor)
			if len(st.Cursor.Models) != 2 || (k > 0 && !bytes.Equal(cj, fj)) {
				t.Errorf("resumed snapshot's cursor %s, want the first run's %s", cj, fj)
			}
		})
	}
}

// pollRec is one record Poll emitted, with the cursor marshalled there.
type pollRec struct {
	model string
	rec   events.Record
	cur   []byte
}

// startPoll runs Poll in a goroutine; stop cancels it and returns its
// error.
func startPoll(t *testing.T, src *Source, from Cursor) (<-chan pollRec, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan pollRec, 1000)
	done := make(chan error, 1)
	go func() {
		done <- src.Poll(ctx, from, PollOptions{Interval: 100 * time.Millisecond}, func(model string, rec events.Record, cur Cursor) error {
			b, err := json.Marshal(cur)
			if err != nil {
				return err
			}
			out <- pollRec{model, rec, b}
			return nil
		})
	}()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { stop() })
	return out, stop
}

// expectPolled waits (at most 2 s, 20 intervals) for the metas and all
// revisions of the given resources, and fails on anything else.
func expectPolled(t *testing.T, ch <-chan pollRec, want ...*resource) []byte {
	t.Helper()
	left := map[string]*resource{}
	for _, r := range want {
		left[r.Model+"|"+r.RID] = r
	}
	var cur []byte
	for len(left) > 0 {
		var p pollRec
		select {
		case p = <-ch:
		case <-waitfor.After(10 * time.Second): // a deadline per record, scaled by the load
			t.Fatalf("Poll emitted nothing more for %s with %d changed resources left", waitfor.Scaled(10*time.Second), len(left))
		}
		mr, ok := p.rec.(*events.MetaRecord)
		if !ok {
			t.Fatalf("Poll emitted a %s where a meta was expected", p.rec.Tag())
		}
		meta, err := mr.Meta()
		if err != nil {
			t.Fatal(err)
		}
		r := left[p.model+"|"+meta.ResourceID]
		if r == nil {
			t.Fatalf("Poll emitted %s %s, which did not change", p.model, meta.ResourceID)
		}
		delete(left, p.model+"|"+meta.ResourceID)
		if !bytes.Equal(mr.Data, r.Last.MetaData) {
			t.Errorf("polled meta of %s differs from what the writer wrote", r.RID)
		}
		for _, rev := range r.Revs {
			select {
			case p = <-ch:
			case <-waitfor.After(10 * time.Second):
				t.Fatalf("Poll did not emit the revisions of %s within %s of the previous record", r.RID, waitfor.Scaled(10*time.Second))
			}
			rr, ok := p.rec.(*events.RevisionRecord)
			if !ok {
				t.Fatalf("Poll emitted a %s where revision %s was expected", p.rec.Tag(), rev.Info.RevisionID)
			}
			res, err := rr.Resource()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(msgpackOf(t, &res.Info), rev.InfoData) || !bytes.Equal(res.RawData, rev.Data) {
				t.Errorf("polled revision %s differs from what the writer wrote", rev.Info.RevisionID)
			}
		}
		cur = p.cur
	}
	return cur
}

// expectQuiet fails if Poll emits anything within d.
func expectQuiet(t *testing.T, ch <-chan pollRec, d time.Duration) {
	t.Helper()
	select {
	case p := <-ch:
		t.Fatalf("Poll emitted a %s of %s, though nothing changed", p.rec.Tag(), p.model)
	case <-time.After(d):
	}
}

// TestPostgresPoll: Poll from a snapshot's cursor emits each change (meta
// and every revision) within a few intervals, including a row committed
// late with an updated_time older than the cursor but inside the overlap
// window; restarted from the persisted cursor it emits nothing again.
func TestPostgresPoll(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t)
	d := populate(t, w)
	src := openSource(t, prefixOf(w), Options{Revisions: true})
	_, st := snapshotAll(t, src, Position{})

	ch, stop := startPoll(t, src, st.Cursor)
	expectQuiet(t, ch, 300*time.Millisecond) // the snapshot's rows are not emitted again

	write := func(wr *specstarpg.Written, err error) *resource {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		d.Add(wr)
		return d[wr.Model][wr.Meta.ResourceID]
	}
	a := write(w.Update(ctx, "issue", "issue:004", payload("polled", 7), specstarpg.Write{}))
	b := write(w.Create(ctx, "user", "user:010", payload("polled", 1), specstarpg.Write{}))
	expectPolled(t, ch, a, b)

	// Committed now, but dated 2 s before the newest row Poll has read:
	// inside the 5 s overlap window.
	late := events.Time{Time: a.Last.Meta.UpdatedTime.Time.Add(-2 * time.Second)}
	c := write(w.Create(ctx, "issue", "issue:050", payload("late", 1), specstarpg.Write{At: late}))
	cur := expectPolled(t, ch, c)
	expectQuiet(t, ch, 300*time.Millisecond)
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll ended with %v, want context.Canceled", err)
	}

	// Restart from the persisted cursor: nothing is emitted again, and a
	// new change is.
	var from Cursor
	if err := json.Unmarshal(cur, &from); err != nil {
		t.Fatal(err)
	}
	ch, stop = startPoll(t, src, from)
	expectQuiet(t, ch, 500*time.Millisecond)
	e := write(w.Update(ctx, "user", "user:002", payload("again", 3), specstarpg.Write{}))
	expectPolled(t, ch, e)
	expectQuiet(t, ch, 300*time.Millisecond)
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll ended with %v, want context.Canceled", err)
	}
}
