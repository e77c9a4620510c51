// Package sinktest is the conformance suite for sink backends: one Run
// call checks, through the sink.Reader (and sink.Lister) a user would
// read with, that a backend applies SpecStar's golden archives
// byte-identically, replays them as no-ops, lets the newer meta win,
// purges, reports missing records as fs.ErrNotExist, survives a crash
// between Apply and Flush, refuses hostile identifiers and lists in byte
// order. Every backend's tests call Run, so that the backends keep one
// contract instead of each its own copy of the scenarios.
package sinktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// Backend describes a backend under test, so Run can drive it and know
// which of its deviations from a full store are by design.
type Backend struct {
	// Open opens a fresh, empty sink (a new directory, table prefix,
	// bucket...), closed by the backend's test when it ends. Run calls it
	// once per subtest (and more where it compares two stores).
	Open func(t *testing.T) sink.Sink
	// Reopen opens the destination of s again, as a restarted process
	// would. s is abandoned as a crashed process abandons it: Run neither
	// flushes nor closes it afterwards (the backend's test may close it at
	// cleanup). Nil skips the crash and restart checks.
	Reopen func(t *testing.T, s sink.Sink) sink.Sink
	// Metas, Revisions and Blobs say which kinds the backend stores: a
	// kind it never keeps (S3 keeps no metas, Postgres no blobs) must be
	// Skipped or Unchanged by Apply and read back as fs.ErrNotExist.
	Metas, Revisions, Blobs bool
	// Queued says Apply may only validate and queue, the newer-wins
	// decisions being taken at Flush (the Postgres sink, or a layered sink
	// with a Postgres meta store): Apply may then report Written for a
	// record whose final outcome is Unchanged or Stale, so Run accepts
	// Written besides the expected outcome and judges the result through
	// the read side after Flush. Refusals (errors, Skipped) are still
	// checked at Apply.
	Queued bool
	// PathMetaIDs says resource ids become path segments in the meta
	// store (disk), and PathRevisionIDs that resource ids, revision ids
	// and schema versions do in the resource store (disk, S3): "..", "/"
	// and the like must then be refused too. Without them (Postgres,
	// where they are column values) only what no store can hold (empty,
	// NUL) is.
	PathMetaIDs, PathRevisionIDs bool
	// RevisionsAcrossModels says revisions are not keyed by model (the
	// Postgres resource tables are shared by the models of a table
	// prefix, as in SpecStar), so a revision reads back under any model
	// name, including one never applied.
	RevisionsAcrossModels bool
	// Outside describes everything beside the destination of s that a
	// refused record must leave alone (for disk: the tree of the root's
	// parent); Run compares it before and after the refused records. Nil
	// skips that comparison.
	Outside func(t *testing.T, s sink.Sink) string
	// Dump returns everything the destination of s holds (every object,
	// file or row, named, with its bytes), in an order of its own, so
	// that two stores compare byte for byte. Where bytes are not the
	// contract (a SQLite file's pages and change counter) it gives the
	// rows instead. Nil: Run compares what the read side shows (listing,
	// and every record applied read back).
	Dump func(t *testing.T, s sink.Sink) string
}

// Archives are the golden archives Run applies: what the reference
// implementation wrote, with metas, revisions of several schema versions,
// and blobs. medium.acbak is left out: a serial replay of it takes about
// 30 s per pass on disk (one fsync'd write per record), and it adds no
// kind of record the two others lack; the backends' own golden tests
// replay it.
var Archives = []string{"small.acbak", "blobs.acbak"}

// Run runs the conformance suite against b, one subtest per property.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.Open == nil {
		t.Fatal("sinktest: Backend.Open is nil")
	}
	if !b.Metas && !b.Revisions && !b.Blobs {
		t.Fatal("sinktest: the backend holds nothing (Metas, Revisions and Blobs all false)")
	}
	archives := map[string][]sinktestutil.Record{}
	for _, name := range Archives {
		archives[name] = sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, name))
	}
	s := &suite{b: b, archives: archives}
	for _, name := range Archives {
		t.Run("apply/"+name, func(t *testing.T) { s.apply(t, name) })
	}
	for _, name := range Archives {
		t.Run("idempotent/"+name, func(t *testing.T) { s.idempotent(t, name) })
	}
	t.Run("newer-wins", s.newerWins)
	t.Run("purge", s.purge)
	t.Run("missing", s.missing)
	for _, name := range Archives {
		t.Run("crash/"+name, func(t *testing.T) { s.crash(t, name) })
	}
	t.Run("invalid", s.invalid)
	t.Run("uid-conflict", s.uidConflict)
	t.Run("replicas", s.replicas)
	t.Run("listing", s.listing)
}

// suite is one Run: the backend and the archives it applies.
type suite struct {
	b        Backend
	archives map[string][]sinktestutil.Record
}

// record is one decoded archive record.
type record = sinktestutil.Record

// ctx is the context of every call; the test's deadline bounds the run.
var ctx = context.Background()

// held reports whether the backend keeps the kind of r.
func (s *suite) held(r record) bool {
	switch {
	case r.Meta != nil:
		return s.b.Metas
	case r.Rev != nil:
		return s.b.Revisions
	default:
		return s.b.Blobs
	}
}

// describe names a record in messages.
func describe(r record) string {
	switch {
	case r.Meta != nil:
		return fmt.Sprintf("meta %s/%s", r.Model, r.Meta.ResourceID)
	case r.Rev != nil:
		in := r.Rev.Info
		return fmt.Sprintf("revision %s/%s/%s/%s (uid %s)", r.Model, in.ResourceID, in.RevisionID, store.SchemaDir(in.SchemaVersion), in.UID)
	default:
		return fmt.Sprintf("blob %s", r.Blob.FileID)
	}
}

// key is where a record is read back from: two records of one key are
// two versions of one thing.
func key(r record) string {
	switch {
	case r.Meta != nil:
		return "meta\x00" + r.Model + "\x00" + r.Meta.ResourceID
	case r.Rev != nil:
		in := r.Rev.Info
		return "rev\x00" + r.Model + "\x00" + in.ResourceID + "\x00" + in.RevisionID + "\x00" + store.SchemaDir(in.SchemaVersion)
	default:
		return "blob\x00" + r.Blob.FileID
	}
}

// expected is the last record of each key, in first-seen key order: what
// a replay of recs leaves readable (the archives are dumps, one version
// per key; distinct versions of one key are refused by expectedOf).
func expectedOf(t *testing.T, recs []record) []record {
	t.Helper()
	idx := map[string]int{}
	var out []record
	for _, r := range recs {
		k := key(r)
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, r)
			continue
		}
		if r.Blob == nil && !bytes.Equal(out[i].Raw, r.Raw) {
			t.Fatalf("sinktest: the archive holds two different versions of %s; the suite expects one", describe(r))
		}
		out[i] = r
	}
	return out
}

// uidConflict (issue 26, item 7): a revision whose uid is already held by
// another resource overwrote the first's content, so the victim's slot
// served resource_id=evil. It must be refused (dead-lettered), naming both
// resources; a Queued backend, which decides at Flush, may accept it at
// Apply but must leave the first holder's revision as it was and write
// nothing of the second. Checked with the holder flushed before, and in
// the same batch.
func (s *suite) uidConflict(t *testing.T) {
	if !s.b.Revisions {
		t.Skip("the backend keeps no revisions")
	}
	const uid = "dddddddd-0000-4000-8000-000000000001"
	for _, flushBetween := range []bool{true, false} {
		t.Run(fmt.Sprintf("flushed=%v", flushBetween), func(t *testing.T) {
			snk := s.b.Open(t)
			victim := sinktestutil.Revision(t, "victim", "victim:1", uid, events.Null[string](), events.Opt[string]{}, "2024-05-01T00:00:00Z", `{"who":"victim"}`)
			// Newer, so that the newer-wins rule for one uid would pick it.
			evil := sinktestutil.Revision(t, "evil", "evil:1", uid, events.Null[string](), events.Opt[string]{}, "2024-06-01T00:00:00Z", `{"who":"evil"}`)
			if _, err := snk.ApplyRevision(ctx, "issue", victim); err != nil {
				t.Fatalf("apply the victim's revision: %v", err)
			}
			if flushBetween {
				flush(t, snk)
			}
			_, err := snk.ApplyRevision(ctx, "issue", evil)
			switch {
			case err != nil && !sink.IsInvalid(err):
				t.Fatalf("apply a revision of uid %s held by another resource: %v, want an Invalid error (a dead letter)", uid, err)
			case err != nil && !(strings.Contains(err.Error(), `"victim"`) && strings.Contains(err.Error(), `"evil"`)):
				t.Errorf("the refusal %q must name both resource ids", err)
			case err == nil && !s.b.Queued:
				t.Fatalf("a revision of uid %s held by another resource was accepted", uid)
			}
			flush(t, snk)
			if err == nil {
				// Accepted at Apply: the Flush must hand it back to be
				// dead-lettered, not drop it silently.
				r, ok := snk.(sink.Refuser)
				if !ok {
					t.Fatalf("%T accepted a revision of uid %s held by another resource at Apply and cannot report refusing it at Flush (sink.Refuser)", snk, uid)
				}
				got := r.TakeRefusals()
				if len(got) != 1 || got[0].ResourceID != "evil" || got[0].RevisionID != "evil:1" || got[0].UID != uid {
					t.Fatalf("refusals after the flush: %+v, want the evil revision alone", got)
				}
				if msg := got[0].Err.Error(); !sink.IsInvalid(got[0].Err) || !strings.Contains(msg, `"victim"`) || !strings.Contains(msg, `"evil"`) {
					t.Errorf("the refusal %q must be Invalid and name both resource ids", msg)
				}
				if again := r.TakeRefusals(); len(again) != 0 {
					t.Errorf("refusals handed out twice: %+v", again)
				}
			}
			rd := reader(t, snk)
			info, data, err := rd.Revision(ctx, "issue", "victim", "victim:1", events.Null[string]())
			if err != nil {
				t.Fatalf("read the victim's revision: %v", err)
			}
			if info.ResourceID != "victim" || string(data) != `{"who":"victim"}` {
				t.Errorf("the victim's slot serves resource_id=%q, payload %q", info.ResourceID, data)
			}
			if _, _, err := rd.Revision(ctx, "issue", "evil", "evil:1", events.Null[string]()); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused revision reads back as %v, want fs.ErrNotExist", err)
			}
		})
	}
}

// reader is the sink as a sink.Reader; every backend under test must be one.
func reader(t *testing.T, snk sink.Sink) sink.Reader {
	t.Helper()
	r, ok := snk.(sink.Reader)
	if !ok {
		t.Fatalf("sinktest: %T is not a sink.Reader: the suite checks everything through the read side", snk)
	}
	return r
}

// ------------------------------------------------------------- subtests

// apply: every record of an archive, applied then flushed, reads back
// byte-equal.
func (s *suite) apply(t *testing.T, name string) {
	recs := s.archives[name]
	snk := s.b.Open(t)
	outs := s.applyAll(t, snk, recs)
	s.checkOutcomes(t, recs, outs, sink.Written, sink.Unchanged)
	flush(t, snk)
	s.readBack(t, snk, expectedOf(t, recs))
	s.checkListing(t, snk, recs)
}

// idempotent: applying an archive again after a flush, on the same sink
// and on a restarted one, is Unchanged and changes nothing read back.
func (s *suite) idempotent(t *testing.T, name string) {
	recs := s.archives[name]
	want := expectedOf(t, recs)
	snk := s.b.Open(t)
	s.applyAll(t, snk, recs)
	flush(t, snk)

	outs := s.applyAll(t, snk, recs)
	s.checkOutcomes(t, recs, outs, sink.Unchanged)
	flush(t, snk)
	s.readBack(t, snk, want)
	s.checkListing(t, snk, recs)

	if s.b.Reopen == nil {
		return
	}
	again := s.b.Reopen(t, snk)
	outs = s.applyAll(t, again, recs)
	s.checkOutcomes(t, recs, outs, sink.Unchanged)
	flush(t, again)
	s.readBack(t, again, want)
	s.checkListing(t, again, recs)
}

// newerWins: of two metas of one resource, the one updated later stays,
// in either arrival order, across a flush or within one batch.
func (s *suite) newerWins(t *testing.T) {
	if !s.b.Metas {
		t.Skip("the backend holds no metas")
	}
	const model = "issue"
	older := func(rid string) *events.ResourceMeta {
		return sinktestutil.Meta(t, rid, "2024-05-01T00:00:00Z", 1, "older")
	}
	newer := func(rid string) *events.ResourceMeta {
		return sinktestutil.Meta(t, rid, "2024-05-02T00:00:00Z", 2, "newer")
	}
	snk := s.b.Open(t)
	rd := reader(t, snk)
	step := func(m *events.ResourceMeta, want sink.Outcome) {
		t.Helper()
		out, err := snk.ApplyMeta(ctx, model, m)
		if err != nil {
			t.Fatalf("apply %s by %s: %v", m.ResourceID, m.UpdatedBy, err)
		}
		if out != want && !(s.b.Queued && out == sink.Written) {
			t.Errorf("apply %s by %s: %v, want %v", m.ResourceID, m.UpdatedBy, out, want)
		}
	}
	check := func(rid string) {
		t.Helper()
		got, err := rd.Meta(ctx, model, rid)
		if err != nil {
			t.Fatalf("read %s: %v", rid, err)
		}
		if !bytes.Equal(sinktestutil.Enc(t, got), sinktestutil.Enc(t, newer(rid))) {
			t.Errorf("%s: the meta read back is updated by %q, want the newer one", rid, got.UpdatedBy)
		}
	}

	// Newer first, older after a flush: Stale, the newer stays.
	step(newer("r1"), sink.Written)
	flush(t, snk)
	step(older("r1"), sink.Stale)
	flush(t, snk)
	check("r1")
	// Older first, newer after a flush: it replaces the older.
	step(older("r2"), sink.Written)
	flush(t, snk)
	step(newer("r2"), sink.Written)
	flush(t, snk)
	check("r2")
	// Both orders within one batch.
	step(newer("r3"), sink.Written)
	step(older("r3"), sink.Stale)
	step(older("r4"), sink.Written)
	step(newer("r4"), sink.Written)
	flush(t, snk)
	check("r3")
	check("r4")
	// A restarted sink still refuses the older one.
	if s.b.Reopen != nil {
		again := s.b.Reopen(t, snk)
		snk, rd = again, reader(t, again)
		step(older("r1"), sink.Stale)
		flush(t, snk)
		check("r1")
	}
}

// purge: ApplyPurge removes a resource's meta and revisions from the read
// side; a purge older than the stored meta leaves everything; purging
// again, or a resource never seen, is a no-op.
func (s *suite) purge(t *testing.T) {
	if !s.b.Metas && !s.b.Revisions {
		t.Skip("the backend holds neither metas nor revisions")
	}
	recs := s.archives["small.acbak"]
	want := expectedOf(t, recs)
	model, meta, _ := sinktestutil.PurgeTarget(t, recs)
	rid := meta.ResourceID
	latest := meta.UpdatedTime.Instant()
	var gone, kept []record
	for _, r := range want {
		switch {
		case r.Meta != nil && r.Model == model && r.Meta.ResourceID == rid:
		case r.Rev != nil && r.Model == model && r.Rev.Info.ResourceID == rid:
			if u := r.Rev.Info.UpdatedTime.Instant(); u.After(latest) {
				latest = u
			}
		default:
			kept = append(kept, r)
			continue
		}
		gone = append(gone, r)
	}
	snk := s.b.Open(t)
	s.applyAll(t, snk, recs)
	flush(t, snk)
	purge := func(rid string, at time.Time, want sink.Outcome) {
		t.Helper()
		out, err := snk.ApplyPurge(ctx, model, rid, events.Time{Time: at})
		if err != nil {
			t.Fatalf("purge %s/%s at %v: %v", model, rid, at, err)
		}
		if out != want && !(s.b.Queued && out == sink.Written) {
			t.Errorf("purge %s/%s at %v: %v, want %v", model, rid, at, out, want)
		}
		flush(t, snk)
	}

	if s.b.Metas {
		// Purged before its last update: the resource was re-created
		// since, and stays whole.
		purge(rid, meta.UpdatedTime.Instant().Add(-time.Second), sink.Stale)
		s.readBack(t, snk, want)
	}

	purge(rid, latest.Add(time.Hour), sink.Written)
	rd := reader(t, snk)
	for _, r := range gone {
		if _, err := readRaw(rd, r); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after the purge, %s reads as %v, want an error wrapping fs.ErrNotExist", describe(r), err)
		}
	}
	s.readBack(t, snk, kept)
	s.checkListing(t, snk, kept)

	purge(rid, latest.Add(time.Hour), sink.Unchanged)
	purge("no-such-resource", latest.Add(time.Hour), sink.Unchanged)
	for _, r := range gone {
		if _, err := readRaw(rd, r); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after purging again, %s reads as %v, want an error wrapping fs.ErrNotExist", describe(r), err)
		}
	}
	s.readBack(t, snk, kept)
	s.checkListing(t, snk, kept)
}

// missing: a record never applied reads as an error wrapping
// fs.ErrNotExist, in an empty sink and beside applied records.
func (s *suite) missing(t *testing.T) {
	snk := s.b.Open(t)
	rd := reader(t, snk)
	recs := s.archives["small.acbak"]
	var m *events.ResourceMeta
	var rev *events.RawResource
	model := ""
	for _, r := range recs {
		if r.Meta != nil && m == nil {
			m, model = r.Meta, r.Model
		}
	}
	for _, r := range recs {
		if r.Rev != nil && r.Model == model && rev == nil {
			rev = r.Rev
		}
	}
	if m == nil || rev == nil {
		t.Fatal("sinktest: small.acbak has no meta and revision of one model")
	}
	absentBlob := dedup.FileID([]byte("sinktest: a blob never applied"))
	check := func(when string) {
		t.Helper()
		expectMissing := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: %s reads as %v, want an error wrapping fs.ErrNotExist", when, what, err)
			}
		}
		_, err := rd.Meta(ctx, model, "no-such-resource")
		expectMissing("an absent meta", err)
		_, err = rd.Meta(ctx, "nosuchmodel", m.ResourceID)
		expectMissing("a meta of an absent model", err)
		_, _, err = rd.Revision(ctx, model, "no-such-resource", "no-such-resource:1", events.Null[string]())
		expectMissing("a revision of an absent resource", err)
		in := rev.Info
		_, _, err = rd.Revision(ctx, model, in.ResourceID, in.RevisionID+"-no-such", in.SchemaVersion)
		expectMissing("an absent revision of a resource", err)
		_, _, err = rd.Revision(ctx, model, in.ResourceID, in.RevisionID, events.Some("no-such-schema-version"))
		expectMissing("a revision at an absent schema version", err)
		if !s.b.RevisionsAcrossModels {
			_, _, err = rd.Revision(ctx, "nosuchmodel", in.ResourceID, in.RevisionID, in.SchemaVersion)
			expectMissing("a revision of an absent model", err)
		}
		_, rc, err := rd.OpenBlob(ctx, absentBlob)
		if rc != nil {
			rc.Close()
		}
		expectMissing("an absent blob", err)
	}
	check("empty sink")
	s.applyAll(t, snk, recs)
	flush(t, snk)
	check("after small.acbak")
	// Kinds the backend does not hold read as missing (readBack checks
	// that for each record of a kind not held).
	s.readBack(t, snk, expectedOf(t, recs))
}

// crash: a batch applied but never flushed, then the process restarted
// and the batch redelivered, reads back as a clean run; after the
// restart and before the redelivery, nothing reads as a partial or
// different record.
func (s *suite) crash(t *testing.T, name string) {
	if s.b.Reopen == nil {
		t.Skip("the backend cannot be reopened (Backend.Reopen is nil)")
	}
	recs := s.archives[name]
	want := expectedOf(t, recs)
	first := s.b.Open(t)
	s.applyAll(t, first, recs)
	snk := s.b.Reopen(t, first) // no Flush, no Close: a crash

	rd := reader(t, snk)
	bad := 0
	for _, r := range want {
		if err := s.readOne(rd, r); err != nil && !errors.Is(err, fs.ErrNotExist) {
			if bad++; bad <= 10 {
				t.Errorf("after the crash, %s: %v (want it either missing or whole)", describe(r), err)
			}
		}
	}
	if ls := listing(t, snk); ls != nil {
		full := s.wantListing(recs)
		for m, ids := range ls {
			for _, id := range ids {
				if !slices.Contains(full[m], id) {
					t.Errorf("after the crash, %s/%s is listed but was never applied", m, id)
				}
			}
		}
	}

	outs := s.applyAll(t, snk, recs)
	s.checkOutcomes(t, recs, outs, sink.Written, sink.Unchanged)
	flush(t, snk)
	s.readBack(t, snk, want)
	s.checkListing(t, snk, recs)
}

// invalid: hostile identifiers are refused with an error sink.IsInvalid
// recognizes, nothing beside the store is touched, nothing they named
// reads back, and they do not poison the batch they were refused from.
func (s *suite) invalid(t *testing.T) {
	snk := s.b.Open(t)
	var outside string
	if s.b.Outside != nil {
		outside = s.b.Outside(t, snk)
	}
	before := listing(t, snk)

	const uid = "cccccccc-0000-4000-8000-000000000001"
	models := []string{"", "..", "../x", "../../../../tmp/x", "a/b", "/abs", "a\x00b"}
	ids := []string{"", "x\x00y"}
	pathIDs := []string{".", "..", "../x", "a/b", "/abs", "../../../../tmp/x"}
	type attempt struct {
		name string
		do   func() (sink.Outcome, error)
	}
	var attempts []attempt
	meta := func(model, rid string) {
		attempts = append(attempts, attempt{fmt.Sprintf("meta model=%q rid=%q", model, rid), func() (sink.Outcome, error) {
			return snk.ApplyMeta(ctx, model, sinktestutil.Meta(t, rid, "2024-05-01T00:00:00Z", 1, "a"))
		}})
	}
	rev := func(model string, mut func(*events.RawResource)) {
		r := sinktestutil.Revision(t, "r:1", "r:1:1", uid, events.Null[string](), events.Opt[string]{}, "2024-05-01T00:00:00Z", `{}`)
		mut(r)
		in := r.Info
		attempts = append(attempts, attempt{fmt.Sprintf("revision model=%q uid=%q rid=%q rev=%q sv=%+v", model, in.UID, in.ResourceID, in.RevisionID, in.SchemaVersion),
			func() (sink.Outcome, error) { return snk.ApplyRevision(ctx, model, r) }})
	}
	purge := func(model, rid string) {
		attempts = append(attempts, attempt{fmt.Sprintf("purge model=%q rid=%q", model, rid), func() (sink.Outcome, error) {
			return snk.ApplyPurge(ctx, model, rid, sinktestutil.MustTime(t, "2024-06-01T00:00:00Z"))
		}})
	}
	for _, m := range models {
		if s.b.Metas {
			meta(m, "issue:1")
		}
		if s.b.Revisions {
			rev(m, func(*events.RawResource) {})
		}
		purge(m, "issue:1")
	}
	for _, id := range append(ids, pathIDs...) {
		path := slices.Contains(pathIDs, id)
		if s.b.Metas && (!path || s.b.PathMetaIDs) {
			meta("issue", id)
		}
		if s.b.Revisions && (!path || s.b.PathRevisionIDs) {
			rev("issue", func(r *events.RawResource) { r.Info.ResourceID = id })
			rev("issue", func(r *events.RawResource) { r.Info.RevisionID = id })
		}
		// A purge reaches the meta and the resource store alike.
		if !path || s.b.PathMetaIDs && s.b.Metas || s.b.PathRevisionIDs && s.b.Revisions {
			purge("issue", id)
		}
	}
	if s.b.Metas {
		attempts = append(attempts, attempt{"nil meta", func() (sink.Outcome, error) { return snk.ApplyMeta(ctx, "issue", nil) }})
	}
	if s.b.Revisions {
		for _, u := range []string{"", "not-a-uuid", "../../x", strings.ToUpper(uid)} {
			rev("issue", func(r *events.RawResource) { r.Info.UID = u })
		}
		if s.b.PathRevisionIDs {
			for _, sv := range []string{"a/b", "../../x", "x\x00"} {
				rev("issue", func(r *events.RawResource) { r.Info.SchemaVersion = events.Some(sv) })
			}
		}
		attempts = append(attempts, attempt{"nil revision", func() (sink.Outcome, error) { return snk.ApplyRevision(ctx, "issue", nil) }})
	}
	if s.b.Blobs {
		attempts = append(attempts,
			attempt{`blob ""`, func() (sink.Outcome, error) { return snk.ApplyBlob(ctx, "", 1, "", strings.NewReader("x")) }},
			attempt{"blob of negative size", func() (sink.Outcome, error) {
				return snk.ApplyBlob(ctx, dedup.FileID(nil), -1, "", strings.NewReader(""))
			}},
		)
	}
	for _, a := range attempts {
		out, err := a.do()
		if !sink.IsInvalid(err) {
			t.Errorf("%s: %v, %v; want an error for which sink.IsInvalid is true", a.name, out, err)
		}
	}
	// The batch goes on: a good record after the refused ones is stored.
	good := []record{}
	for _, r := range s.archives["small.acbak"] {
		if s.held(r) && r.Blob == nil {
			good = append(good, r)
			break
		}
	}
	s.applyAll(t, snk, good)
	flush(t, snk)
	s.readBack(t, snk, good)

	if s.b.Outside != nil {
		if after := s.b.Outside(t, snk); after != outside {
			t.Errorf("refused records changed what lies beside the store:\nbefore %s\n after %s", outside, after)
		}
	}
	if before != nil {
		after := listing(t, snk)
		if want := s.wantListing(good); !reflect.DeepEqual(after, want) {
			t.Errorf("after refused records, the sink lists %s; want only the good record %s", summarize(after), summarize(want))
		}
	}
}

// listIDs are resource ids in shuffled order; their byte order is "A" <
// "a" < "a-b" < "a.b" < "a_b" < "b" < "e" < "z" < "é" < "日本": capitals
// before lowercase, UTF-8 after ASCII, not a locale's dictionary order.
var listIDs = []string{"b", "日本", "a_b", "A", "é", "a-b", "z", "a", "a.b", "e"}

// listing: Models and ResourceIDs list exactly what was applied, in byte
// order; a model never applied lists no ids.
func (s *suite) listing(t *testing.T) {
	snk := s.b.Open(t)
	ls, ok := snk.(sink.Lister)
	if !ok {
		t.Skipf("%T is not a sink.Lister", snk)
	}
	if got := listing(t, snk); len(got) != 0 {
		t.Errorf("an empty sink lists %s", summarize(got))
	}
	recs := slices.Clone(s.archives["small.acbak"])
	const uidFmt = "dddddddd-0000-4000-8000-%012d"
	n := 0
	for _, model := range []string{"zeta", "a-b", "Issue"} {
		for _, id := range listIDs {
			n++
			if s.b.Metas {
				recs = append(recs, record{Model: model, Meta: sinktestutil.Meta(t, id, "2024-05-01T00:00:00Z", 1, "alice")})
			}
			if s.b.Revisions {
				recs = append(recs, record{Model: model, Rev: sinktestutil.Revision(t, id, id+":1", fmt.Sprintf(uidFmt, n),
					events.Null[string](), events.Opt[string]{}, "2024-05-01T00:00:00Z", `{}`)})
			}
		}
	}
	s.applyAll(t, snk, recs)
	flush(t, snk)
	s.checkListing(t, snk, recs)
	for id, err := range ls.ResourceIDs(ctx, "nosuchmodel") {
		t.Errorf("a model never applied lists %q, %v", id, err)
		break
	}
	// Stopping early is not an error.
	for id, err := range ls.ResourceIDs(ctx, "zeta") {
		if err != nil || id != "A" {
			t.Errorf("first id of zeta: %q, %v; want \"A\"", id, err)
		}
		break
	}
}
