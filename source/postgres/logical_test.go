package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
)

// logicalEnv is a cluster with a writer and a source on one prefix.
type logicalEnv struct {
	dsn string
	w   *specstarpg.Writer
	src *Source
	o   LogicalOptions
}

func newLogicalEnv(t *testing.T) *logicalEnv {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.LogicalCluster(t)
	prefix := randomPrefix()
	w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	for _, m := range []string{"issue", "user"} {
		if err := w.CreateModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	src, err := Open(ctx, dsn, Options{TablePrefix: prefix, Revisions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return &logicalEnv{dsn: dsn, w: w, src: src, o: LogicalOptions{Heartbeat: 100 * time.Millisecond}}
}

// collector records what a stream emits; with auto it confirms each
// commit at once.
type collector struct {
	mu        sync.Mutex
	auto      bool
	metas     map[string][][]byte // model/rid -> meta bytes in order
	revs      map[string]int      // model/rid -> revision records
	revData   map[string][]byte   // model/rid/revision_id -> the payload emitted
	purges    map[string]int
	commits   []pglogrepl.LSN
	confirmed pglogrepl.LSN
	valid     map[pglogrepl.LSN]bool // every LSN ever confirmed
	handled   int                    // records, purges and commits received
}

// progress is how many records, purges and commits c received.
func (c *collector) progress() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handled
}

func newCollector(auto bool, start pglogrepl.LSN) *collector {
	return &collector{auto: auto, metas: map[string][][]byte{}, revs: map[string]int{}, revData: map[string][]byte{}, purges: map[string]int{},
		confirmed: start, valid: map[pglogrepl.LSN]bool{start: true}}
}

func (c *collector) handler() LogicalHandler {
	return LogicalHandler{
		Record: func(model string, rec events.Record, lsn pglogrepl.LSN) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.handled++
			switch r := rec.(type) {
			case *events.MetaRecord:
				m, err := events.DecodeResourceMeta(events.Msgpack, r.Data)
				if err != nil {
					return err
				}
				k := model + "/" + m.ResourceID
				c.metas[k] = append(c.metas[k], r.Data)
			case *events.RevisionRecord:
				res, err := r.Resource()
				if err != nil {
					return err
				}
				c.revs[model+"/"+res.Info.ResourceID]++
				c.revData[model+"/"+res.Info.ResourceID+"/"+res.Info.RevisionID] = res.RawData
			}
			return nil
		},
		Purge: func(model, rid string, lsn pglogrepl.LSN, _ time.Time) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.handled++
			c.purges[model+"/"+rid]++
			return nil
		},
		Commit: func(lsn pglogrepl.LSN) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.handled++
			c.commits = append(c.commits, lsn)
			if c.auto {
				c.confirmLocked(lsn)
			}
			return nil
		},
		Confirmed: func() pglogrepl.LSN {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.confirmed
		},
	}
}

func (c *collector) confirmLocked(lsn pglogrepl.LSN) {
	c.confirmed = lsn
	c.valid[lsn] = true
}

// committedPast reports whether a commit after lsn was handed over:
// commits come in batches, a little after their records.
func (c *collector) committedPast(lsn pglogrepl.LSN) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.commits) > 0 && c.commits[len(c.commits)-1] > lsn
}

func (c *collector) confirmAll() pglogrepl.LSN {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.commits); n > 0 {
		c.confirmLocked(c.commits[n-1])
	}
	return c.confirmed
}

// hasMeta reports whether the meta bytes b were emitted for model/rid.
func (c *collector) hasMeta(model, rid string, b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.metas[model+"/"+rid], func(x []byte) bool { return bytes.Equal(x, b) })
}

func (c *collector) purged(model, rid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.purges[model+"/"+rid] > 0
}

// hasRevision reports whether the revision wr wrote was emitted with the
// payload bytes SpecStar wrote.
func (c *collector) hasRevision(wr *specstarpg.Written) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.revData[wr.Model+"/"+wr.Meta.ResourceID+"/"+wr.Info.RevisionID]
	return ok && bytes.Equal(got, wr.Data)
}

func (c *collector) revCount(model, rid string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revs[model+"/"+rid]
}

// stream runs StreamLogical in the background; the returned stop cancels
// it and waits for it to end, failing the test on any other error.
func (e *logicalEnv) stream(t *testing.T, start pglogrepl.LSN, c *collector) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.src.StreamLogical(ctx, e.dsn, e.o, start, c.handler()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("StreamLogical: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor waits until cond holds, failing only after a stall window
// scaled by the machine's load (waitfor.For): a fixed 20 s once failed
// TestLogicalRevisionWithoutMeta on a loaded machine (issue 25, item 8).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.For(t, what, cond)
}

// waitCollected waits until cond holds, failing only when c received
// nothing for a stall window scaled by the load.
func waitCollected(t *testing.T, c *collector, what string, cond func() bool) {
	t.Helper()
	waitfor.Until(t, what, waitfor.Options{Progress: c.progress}, cond)
}

func mustWrite(t *testing.T) func(*specstarpg.Written, error) *specstarpg.Written {
	return func(wr *specstarpg.Written, err error) *specstarpg.Written {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return wr
	}
}

// expectEmitted waits until every write's meta bytes were emitted with
// the revision it wrote (its payload bytes as written).
func expectEmitted(t *testing.T, c *collector, wrs ...*specstarpg.Written) {
	t.Helper()
	for _, wr := range wrs {
		m, rid := wr.Model, wr.Meta.ResourceID
		waitFor(t, fmt.Sprintf("the meta of %s %s revision %d", m, rid, wr.Meta.TotalRevisionCount), func() bool {
			return c.hasMeta(m, rid, wr.MetaData) && c.hasRevision(wr)
		})
	}
}

func deleteMeta(t *testing.T, e *logicalEnv, model, rid string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `DELETE FROM `+ident(e.w.MetaTable(model))+` WHERE resource_id = $1`, rid); err != nil {
		t.Fatal(err)
	}
}

func snapshotMetas(t *testing.T, e *logicalEnv, name string) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	_, err := e.src.SnapshotAt(context.Background(), name, Position{}, func(model string, rec events.Record, pos Position) error {
		if r, ok := rec.(*events.MetaRecord); ok {
			m, err := events.DecodeResourceMeta(events.Msgpack, r.Data)
			if err != nil {
				return err
			}
			got[model+"/"+m.ResourceID] = r.Data
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestLogicalStream: Setup + SnapshotAt + StreamLogical; creates, updates
// (meta bytes as written, with all revisions) and a delete (a purge) made
// while streaming are emitted.
func TestLogicalStream(t *testing.T) {
	ctx := context.Background()
	e := newLogicalEnv(t)
	must := mustWrite(t)
	before := must(e.w.Create(ctx, "issue", "issue:1", payload("one", 0), specstarpg.Write{}))
	start, err := e.src.SetupLogical(ctx, e.dsn, e.o)
	if err != nil {
		t.Fatal(err)
	}
	if !start.Created || start.SnapshotName == "" || start.LSN == 0 {
		t.Fatalf("SetupLogical of a new slot: %+v", start)
	}
	snap := snapshotMetas(t, e, start.SnapshotName)
	if err := start.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap["issue/issue:1"], before.MetaData) || len(snap) != 1 {
		t.Fatalf("SnapshotAt read %d metas, want exactly issue:1 as written", len(snap))
	}
	c := newCollector(true, start.LSN)
	e.stream(t, start.LSN, c)

	a := must(e.w.Create(ctx, "issue", "issue:2", payload("two", 0), specstarpg.Write{}))
	b := must(e.w.Create(ctx, "user", "user:1", payload("u", 0), specstarpg.Write{SchemaVersion: events.Some("v1")}))
	a2 := must(e.w.Update(ctx, "issue", "issue:2", payload("two", 1), specstarpg.Write{By: "editor"}))
	u1 := must(e.w.Update(ctx, "issue", "issue:1", payload("one", 1), specstarpg.Write{}))
	expectEmitted(t, c, a, b, a2, u1)
	// An update carries its own revision, not the resource's history: the
	// snapshot had issue:1's first revision, the stream only its second;
	// issue:2's two writes give one revision each.
	if n, m := c.revCount("issue", "issue:1"), c.revCount("issue", "issue:2"); n != 1 || m != 2 {
		t.Errorf("revision records emitted: issue:1 %d (want 1, the update's), issue:2 %d (want 2)", n, m)
	}
	deleteMeta(t, e, "user", "user:1")
	waitFor(t, "the purge of user:1", func() bool { return c.purged("user", "user:1") })
	if c.purged("issue", "issue:1") || c.purged("issue", "issue:2") {
		t.Error("a purge of a resource that was not deleted")
	}

	// WAL of tables outside the publication: the idle stream offers the
	// server's position (Commit), the caller confirms it, the slot follows.
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var walNow pglogrepl.LSN
	if _, err := conn.Exec(ctx, `CREATE TABLE unrelated AS SELECT g FROM generate_series(1, 10000) g`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&walNow); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle slot to advance past unrelated WAL", func() bool {
		var flushed pglogrepl.LSN
		if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE database = current_database()`).Scan(&flushed); err != nil {
			t.Fatal(err)
		}
		return flushed >= walNow
	})
}

// TestLogicalHandover: rows written between SetupLogical and SnapshotAt,
// and between SnapshotAt and StreamLogical, are all emitted by one of the
// two.
func TestLogicalHandover(t *testing.T) {
	ctx := context.Background()
	e := newLogicalEnv(t)
	must := mustWrite(t)
	var all []*specstarpg.Written
	all = append(all, must(e.w.Create(ctx, "issue", "before", payload("b", 0), specstarpg.Write{})))
	start, err := e.src.SetupLogical(ctx, e.dsn, e.o)
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, must(e.w.Create(ctx, "issue", "after-setup", payload("s", 0), specstarpg.Write{})))
	all = append(all, must(e.w.Update(ctx, "issue", "before", payload("b", 1), specstarpg.Write{})))
	snap := snapshotMetas(t, e, start.SnapshotName)
	if err := start.Close(); err != nil {
		t.Fatal(err)
	}
	all = append(all, must(e.w.Create(ctx, "user", "after-snapshot", payload("a", 0), specstarpg.Write{})))
	c := newCollector(true, start.LSN)
	e.stream(t, start.LSN, c)
	all = append(all, must(e.w.Create(ctx, "user", "streaming", payload("x", 0), specstarpg.Write{})))
	for _, wr := range all {
		m, rid := wr.Model, wr.Meta.ResourceID
		waitFor(t, fmt.Sprintf("%s %s revision %d in the snapshot or the stream", m, rid, wr.Meta.TotalRevisionCount), func() bool {
			return bytes.Equal(snap[m+"/"+rid], wr.MetaData) || c.hasMeta(m, rid, wr.MetaData)
		})
	}
	if _, ok := snap["issue/after-setup"]; ok {
		t.Error("the snapshot holds a row written after the slot was created")
	}
}

// TestLogicalRestart: a stopped stream restarted from the last confirmed
// LSN emits what changed while stopped and what was emitted but not
// confirmed; the slot's confirmed_flush_lsn only takes LSNs the test
// confirmed.
func TestLogicalRestart(t *testing.T) {
	ctx := context.Background()
	e := newLogicalEnv(t)
	must := mustWrite(t)
	start, err := e.src.SetupLogical(ctx, e.dsn, e.o)
	if err != nil {
		t.Fatal(err)
	}
	start.Close()

	mon, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close(ctx)
	slotLSN := func() (pglogrepl.LSN, bool) {
		var lsn pglogrepl.LSN
		var active bool
		if err := mon.QueryRow(ctx, `SELECT confirmed_flush_lsn, active FROM pg_replication_slots WHERE database = current_database()`).Scan(&lsn, &active); err != nil {
			t.Fatal(err)
		}
		return lsn, active
	}
	// Every value the slot shows is checked against what was confirmed.
	c := newCollector(false, start.LSN)
	var seen []pglogrepl.LSN
	check := func() pglogrepl.LSN {
		lsn, _ := slotLSN()
		seen = append(seen, lsn)
		c.mu.Lock()
		ok := c.valid[lsn]
		c.mu.Unlock()
		if !ok {
			t.Fatalf("slot confirmed_flush_lsn %s was never confirmed by the test (confirmed: %v)", lsn, c.valid)
		}
		return lsn
	}
	stop := e.stream(t, start.LSN, c)
	a := must(e.w.Create(ctx, "issue", "a", payload("a", 0), specstarpg.Write{}))
	expectEmitted(t, c, a)
	for i := 0; i < 10; i++ { // not confirmed: the slot stays put
		if lsn := check(); lsn != start.LSN {
			t.Fatalf("slot moved to %s before any confirmation", lsn)
		}
		time.Sleep(30 * time.Millisecond)
	}
	waitFor(t, "a's commit", func() bool { return c.committedPast(start.LSN) })
	l1 := c.confirmAll()
	waitFor(t, "the slot to reach the confirmed LSN", func() bool { return check() == l1 })
	b := must(e.w.Create(ctx, "issue", "b", payload("b", 0), specstarpg.Write{}))
	expectEmitted(t, c, b)
	time.Sleep(300 * time.Millisecond) // several heartbeats
	if lsn := check(); lsn != l1 {
		t.Fatalf("slot moved to %s, beyond the confirmed %s", lsn, l1)
	}
	stop()
	waitFor(t, "the slot to become inactive", func() bool { _, active := slotLSN(); return !active })

	// While stopped.
	cc := must(e.w.Create(ctx, "user", "c", payload("c", 0), specstarpg.Write{}))
	b2 := must(e.w.Update(ctx, "issue", "b", payload("b", 1), specstarpg.Write{}))
	if lsn := check(); lsn != l1 {
		t.Fatalf("slot at %s after the stop, want %s", lsn, l1)
	}

	c2 := newCollector(false, l1)
	c2.valid = c.valid // one history of confirmations
	c = c2
	e.stream(t, l1, c2)
	// b's create was emitted but never confirmed: its transaction again.
	expectEmitted(t, c2, b, cc, b2)
	if c2.hasMeta("issue", "a", a.MetaData) {
		t.Error("the confirmed change to a was emitted again after the restart")
	}
	waitFor(t, "the commits after the restart", func() bool { return c2.committedPast(l1) })
	l2 := c2.confirmAll()
	if l2 <= l1 {
		t.Fatalf("confirmed %s after the restart, not beyond %s", l2, l1)
	}
	waitFor(t, "the slot to reach the second confirmed LSN", func() bool { return check() == l2 })
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Errorf("slot went back from %s to %s", seen[i-1], seen[i])
		}
	}
}

// TestLogicalDrop: SlotLag is a non-negative byte count; DropLogical
// removes the slot and the publication, and is a no-op the second time.
func TestLogicalDrop(t *testing.T) {
	ctx := context.Background()
	e := newLogicalEnv(t)
	start, err := e.src.SetupLogical(ctx, e.dsn, e.o)
	if err != nil {
		t.Fatal(err)
	}
	start.Close()
	must := mustWrite(t)
	must(e.w.Create(ctx, "issue", "x", payload("x", 0), specstarpg.Write{}))
	lag, err := SlotLag(ctx, e.dsn, e.o)
	if err != nil {
		t.Fatal(err)
	}
	if lag <= 0 { // a write after the slot's creation is retained
		t.Errorf("SlotLag = %d, want > 0 after an unconfirmed write", lag)
	}
	// SetupLogical again finds the slot and keeps its position.
	again, err := e.src.SetupLogical(ctx, e.dsn, e.o)
	if err != nil {
		t.Fatal(err)
	}
	if again.Created || again.SnapshotName != "" || again.LSN != start.LSN {
		t.Errorf("SetupLogical of an existing slot: %+v, want LSN %s and no snapshot", again, start.LSN)
	}
	for i := 0; i < 2; i++ {
		if _, err := DropLogical(ctx, e.dsn, e.o); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var slots, pubs int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_publication)`).Scan(&slots, &pubs); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || pubs != 0 {
		t.Errorf("after DropLogical: %d slots, %d publications", slots, pubs)
	}
	if _, err := SlotLag(ctx, e.dsn, e.o); err == nil {
		t.Error("SlotLag of a dropped slot did not fail")
	}
}

// TestLogicalRevisionWithoutMeta: a transaction that writes a revision
// row but not the meta (the WAL does not describe the whole resource)
// takes the read-back path: the resource's meta and all its revisions,
// the new row's included, are emitted.
func TestLogicalRevisionWithoutMeta(t *testing.T) {
	ctx := context.Background()
	e := newLogicalEnv(t)
	must := mustWrite(t)
	first := must(e.w.Create(ctx, "issue", "issue:1", payload("one", 0), specstarpg.Write{}))
	start, err := e.src.SetupLogical(ctx, e.dsn, e.o)
	if err != nil {
		t.Fatal(err)
	}
	start.Close()
	c := newCollector(true, start.LSN)
	e.stream(t, start.LSN, c)
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A copy of the first revision's rows under a new uid and revision id.
	if _, err := conn.Exec(ctx, `INSERT INTO `+ident(e.w.DataTable())+` (uid, data, info)
		SELECT 'copy-uid', data, info FROM `+ident(e.w.DataTable())+` WHERE uid = $1`, first.Info.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+ident(e.w.IndexTable())+` (resource_id, revision_id, schema_version, uid)
		VALUES ('issue:1', 'copy-rev', '__none__', 'copy-uid')`); err != nil {
		t.Fatal(err)
	}
	waitCollected(t, c, "issue:1's meta and both revision rows read back", func() bool {
		return c.hasMeta("issue", "issue:1", first.MetaData) && c.revCount("issue", "issue:1") >= 2
	})
}
