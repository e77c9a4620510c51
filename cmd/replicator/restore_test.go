package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/streamhistory"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// pitrHistory publishes four phases onto bus: (1) creates, one with an
// inline blob and one with a blob through the object store; (2) updates,
// soft deletes and more creates; (3) a purge of a soft-deleted resource,
// an update and a soft delete; (4) writes after the last restore point.
func pitrHistory(t *testing.T, bus *stream.Bus) *streamhistory.History {
	t.Helper()
	h := streamhistory.New(t, bus)
	small := h.Blob("issue", []byte("a small attachment"))
	large := h.Blob("issue", bytes.Repeat([]byte("large attachment "), 80_000)) // 1.3 MB: over one message
	for i := range 8 {
		var file any
		switch i {
		case 0:
			file = small
		case 1:
			file = large
		}
		h.Write("issue", fmt.Sprintf("issue:%d", i), file)
	}
	h.Write("user", "user:0", nil)
	h.EndPhase()
	for i := range 4 {
		h.Write("issue", fmt.Sprintf("issue:%d", i), nil)
	}
	h.SoftDelete("issue", "issue:5")
	h.SoftDelete("issue", "issue:6")
	h.Write("issue", "issue:8", nil)
	h.Write("user", "user:0", nil)
	h.EndPhase()
	h.Purge("issue", "issue:5")
	h.Write("issue", "issue:1", nil)
	h.SoftDelete("issue", "issue:8")
	h.EndPhase()
	h.Write("issue", "issue:9", nil)
	h.Write("issue", "issue:2", nil)
	h.Purge("issue", "issue:6")
	h.EndPhase()
	return h
}

// sameStores runs verify both ways: each store holds exactly what the
// other does (metas, revisions and blobs).
func sameStores(t *testing.T, a, b string) bool {
	t.Helper()
	c1, o1, _ := runCmd(t, "verify", "--from", a, "--to", b)
	c2, o2, _ := runCmd(t, "verify", "--from", b, "--to", a)
	if c1 != exitOK || c2 != exitOK {
		t.Logf("verify --from %s --to %s: exit %d\n%s", a, b, c1, o1)
		t.Logf("verify --from %s --to %s: exit %d\n%s", b, a, c2, o2)
		return false
	}
	return true
}

// metaOf reads a resource's meta from a disk tree (nil when absent).
func metaOf(t *testing.T, dir, model, rid string) (current string, deleted, present bool) {
	t.Helper()
	spec, err := sink.Parse(dir)
	if err != nil {
		t.Fatal(err)
	}
	snk, err := spec.OpenReader(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	m, err := snk.(sink.Reader).Meta(context.Background(), model, rid)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return m.CurrentRevisionID, m.IsDeleted, true
}

// TestRestoreAsOfThreeTimes (issue 24): a history of creates (with an
// inline blob and one through the object store), updates, soft deletes
// and purges, restored as of three points (an RFC 3339 time that is a
// phase's last event exactly, a sequence, a time between two events),
// each equal to the reference sink built from the same records up to
// that point, and different from the others; the restore says where it
// stopped, refuses a sink that is not empty unless --force, and leaves no
// consumer behind (the sinks' durable ones are untouched).
func TestRestoreAsOfThreeTimes(t *testing.T) {
	bus := testBus(t)
	h := pitrHistory(t, bus)
	nats := []string{"--nats", bus.URL()}
	live := t.TempDir()
	drain(t, bus, live) // a sink run serves, with its durable consumer
	consumers := func() []string {
		var names []string
		for n := range bus.Stream.ListConsumers(t.Context()).Info() {
			names = append(names, n.Name)
		}
		return names
	}
	before := consumers()

	// The third point lies between phase 3's last event and phase 4's first.
	next, err := bus.Stream.GetMsg(t.Context(), h.Phases[2].LastSeq+1)
	if err != nil {
		t.Fatal(err)
	}
	between := h.Phases[2].LastTime.Add(next.Time.Sub(h.Phases[2].LastTime) / 2)
	points := []struct {
		name  string
		args  []string
		phase int // the reference is the state after this many phases
	}{
		{"at the last event of phase 1", []string{"--at", h.Phases[0].LastTime.Format(time.RFC3339Nano)}, 1},
		{"at the sequence ending phase 2", []string{"--at-seq", strconv.FormatUint(h.Phases[1].LastSeq, 10)}, 2},
		{"between phases 3 and 4", []string{"--at", between.Format(time.RFC3339Nano)}, 3},
	}
	restored := make([]string, len(points))
	for i, p := range points {
		dir := filepath.Join(t.TempDir(), "restored") // kept for the checks after the subtests
		t.Run(p.name, func(t *testing.T) {
			code, out, errs := runCmd(t, append(append([]string{"restore", "--to", dir, "--json"}, p.args...), nats...)...)
			if code != exitOK {
				t.Fatalf("restore %v: exit %d\n%s%s", p.args, code, out, errs)
			}
			var sum restoreSummary
			if err := json.Unmarshal([]byte(out), &sum); err != nil {
				t.Fatalf("restore --json: %v\n%s", err, out)
			}
			want := h.Phases[p.phase-1]
			if sum.Sequence != want.LastSeq || !sum.Time.Equal(want.LastTime) || !sum.OK || sum.DeadLettered != 0 {
				t.Errorf("restore %v stopped at sequence %d (%s), want %d (%s): %s", p.args, sum.Sequence, sum.Time, want.LastSeq, want.LastTime, out)
			}
			ref := filepath.Join(t.TempDir(), "reference")
			h.Reference(ref, p.phase)
			if !sameStores(t, ref, dir) {
				t.Errorf("the restore as of phase %d differs from the reference built from the same records", p.phase)
			}
			restored[i] = dir
		})
	}
	if t.Failed() {
		return
	}
	// What a user would look at: the resources as of each point.
	for _, c := range []struct {
		point           int
		rid, current    string
		deleted, exists bool
	}{
		{0, "issue:0", "issue:0:1", false, true},
		{1, "issue:0", "issue:0:2", false, true},
		{0, "issue:5", "issue:5:1", false, true},
		{1, "issue:5", "issue:5:1", true, true}, // soft-deleted: still there
		{2, "issue:5", "", false, false},        // purged: gone from then on
		{2, "issue:6", "issue:6:1", true, true}, // purged only in phase 4
		{0, "issue:8", "", false, false},
		{2, "issue:8", "issue:8:1", true, true},
		{2, "issue:9", "", false, false}, // created after the last point
		{2, "issue:1", "issue:1:3", false, true},
	} {
		cur, del, ok := metaOf(t, restored[c.point], "issue", c.rid)
		if cur != c.current || del != c.deleted || ok != c.exists {
			t.Errorf("restore as of point %d: %s is (current %q, deleted %v, present %v), want (%q, %v, %v)", c.point+1, c.rid, cur, del, ok, c.current, c.deleted, c.exists)
		}
	}
	// The three states differ (so the comparisons above could fail), and
	// the last point is not the stream's end.
	if sameStores(t, restored[0], restored[1]) || sameStores(t, restored[1], restored[2]) || sameStores(t, restored[2], live) {
		t.Error("two restore points, or the last one and the stream's end, gave the same state")
	}

	// A sink that is not empty is refused, and restored into with --force.
	at := []string{"--at-seq", strconv.FormatUint(h.Phases[1].LastSeq, 10)}
	if code, out, errs := runCmd(t, append(append([]string{"restore", "--to", restored[2]}, at...), nats...)...); code != exitError || !strings.Contains(errs, "is not empty") || !strings.Contains(errs, "--force") {
		t.Errorf("restore into a sink that holds metas: exit %d, want 2 naming --force\n%s%s", code, out, errs)
	}
	code, out, errs := runCmd(t, append(append([]string{"restore", "--to", restored[1], "--force"}, at...), nats...)...)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("as of sequence %d (stored %s)", h.Phases[1].LastSeq, h.Phases[1].LastTime.UTC().Format(time.RFC3339Nano))) {
		t.Errorf("restore --force: exit %d, want 0 saying the sequence and time it stopped at\n%s%s", code, out, errs)
	}
	if after := consumers(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("consumers before the restores %v, after %v: a restore left its consumer or touched another", before, after)
	}
}

// TestRestoreRefusesWhatRetentionRemoved (issue 24 item 3): once the
// stream's first events are gone (a purge of the stream here; max-age and
// max-bytes do the same), stream info shows the earliest restorable time
// and what was dropped; a restore before it fails with exit 1 naming that
// time; one after it is refused as incomplete unless --accept-gap.
func TestRestoreRefusesWhatRetentionRemoved(t *testing.T) {
	bus := testBus(t)
	nats := []string{"--nats", bus.URL()}
	h := streamhistory.New(t, bus)
	for i := range 3 {
		h.Write("issue", fmt.Sprintf("issue:%d", i), nil)
	}
	early := h.EndPhase()
	code, out, errs := runCmd(t, append([]string{"stream", "info"}, nats...)...)
	if code != exitOK || !strings.Contains(out, "(sequence 1); nothing was dropped") {
		t.Errorf("stream info of a whole stream: exit %d\n%s%s", code, out, errs)
	}
	for i := range 3 {
		h.Write("issue", fmt.Sprintf("issue:%d", i), nil)
	}
	late := h.EndPhase()
	if err := bus.Stream.Purge(t.Context(), jetstream.WithPurgeSequence(early.LastSeq+1)); err != nil {
		t.Fatal(err)
	}
	first, err := bus.Stream.GetMsg(t.Context(), early.LastSeq+1)
	if err != nil {
		t.Fatal(err)
	}
	earliest := first.Time.UTC().Format(time.RFC3339Nano)

	code, out, errs = runCmd(t, append([]string{"stream", "info"}, nats...)...)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("restorable from   %s (sequence %d); sequences 1..%d were removed", earliest, early.LastSeq+1, early.LastSeq)) {
		t.Errorf("stream info after the stream lost its first events: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = runCmd(t, append([]string{"stream", "info", "--json"}, nats...)...)
	var info struct {
		Config  struct{ Name string } `json:"config"`
		Restore struct {
			Seq     uint64    `json:"earliest_sequence"`
			Time    time.Time `json:"earliest_time"`
			Dropped uint64    `json:"dropped"`
		} `json:"restore"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || code != exitOK {
		t.Fatalf("stream info --json: exit %d %v\n%s", code, err, out)
	}
	if info.Config.Name != "SPECSTAR" || info.Restore.Seq != early.LastSeq+1 || !info.Restore.Time.Equal(first.Time) || info.Restore.Dropped != early.LastSeq {
		t.Errorf("stream info --json: %+v, want the earliest sequence %d at %s, %d dropped, beside JetStream's own fields", info, early.LastSeq+1, earliest, early.LastSeq)
	}

	for _, c := range []struct {
		args []string
		want int
		says string
	}{
		{[]string{"--at", early.LastTime.Format(time.RFC3339Nano)}, exitDiffer, earliest},
		{[]string{"--at-seq", "1"}, exitDiffer, earliest},
		{[]string{"--at", "1000h"}, exitDiffer, earliest},
		{[]string{"--at", late.LastTime.Format(time.RFC3339Nano)}, exitDiffer, "--accept-gap"},
		{[]string{"--at", late.LastTime.Format(time.RFC3339Nano), "--accept-gap"}, exitOK, ""},
		{[]string{"--at", "yesterday"}, exitError, "RFC 3339"},
		{[]string{}, exitError, "--at"},
	} {
		dir := t.TempDir()
		code, out, errs := runCmd(t, append(append([]string{"restore", "--to", dir}, c.args...), nats...)...)
		if code != c.want || !strings.Contains(errs, c.says) {
			t.Errorf("restore %v: exit %d, want %d saying %q\n%s%s", c.args, code, c.want, c.says, out, errs)
		}
		if c.want == exitDiffer && len(strings.Split(strings.TrimSpace(errs), "\n")) != 1 {
			t.Errorf("restore %v: the refusal is not one line:\n%s", c.args, errs)
		}
	}
}

// TestRestoreLostBlobIsDeadLettered (issue 24 item 4): a blob the object
// store no longer holds (its retention shorter than the stream's) cannot
// be restored: its event is dead-lettered, the rest is restored, and the
// restore exits 1 pointing at the dead letters.
func TestRestoreLostBlobIsDeadLettered(t *testing.T) {
	bus := testBus(t)
	h := streamhistory.New(t, bus)
	large := bytes.Repeat([]byte("x"), 2<<20)
	h.Write("issue", "issue:0", h.Blob("issue", large))
	end := h.EndPhase()
	obj, err := bus.Blobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := obj.Delete(t.Context(), dedup.FileID(large)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errs := runCmd(t, "restore", "--to", dir, "--at-seq", strconv.FormatUint(end.LastSeq, 10), "--nats", bus.URL())
	if code != exitDiffer || !strings.Contains(out, "1 dead-lettered") || !strings.Contains(errs, "replicator dlq list --consumer restore-") {
		t.Errorf("restore with a blob the object store lost: exit %d, want 1 naming the dead letters\n%s%s", code, out, errs)
	}
	if cur, _, ok := metaOf(t, dir, "issue", "issue:0"); !ok || cur != "issue:0:1" {
		t.Errorf("the resource whose blob was lost is not restored: %q %v", cur, ok)
	}
}

// TestRestoreIntoPostgresDeployment: a restore goes into any deployment
// run feeds, here SpecStar's Postgres tables (metas and revisions) with
// its blobs on disk: as of phase 2 it holds the reference built from the
// same records (and not the stream's end), and a second restore into it
// is refused as not empty.
func TestRestoreIntoPostgresDeployment(t *testing.T) {
	bus := testBus(t)
	h := pitrHistory(t, bus)
	pg := pgtest.SharedDSN() + "&table_prefix=" + pgtest.Prefix(t) + "&revisions=true"
	deployment := []string{"--meta", pg, "--resources", pg, "--blobs", "disk:" + t.TempDir()}
	at := []string{"--at-seq", strconv.FormatUint(h.Phases[1].LastSeq, 10), "--nats", bus.URL()}
	if code, out, errs := runCmd(t, append(append([]string{"restore"}, deployment...), at...)...); code != exitOK {
		t.Fatalf("restore into the deployment: exit %d\n%s%s", code, out, errs)
	}
	ref, end := filepath.Join(t.TempDir(), "reference"), filepath.Join(t.TempDir(), "end")
	h.Reference(ref, 2)
	h.Reference(end, 4)
	if code, out, _ := runCmd(t, append([]string{"verify", "--from", ref}, deployment...)...); code != exitOK {
		t.Errorf("the deployment restored as of phase 2 lacks what the reference holds: exit %d\n%s", code, out)
	}
	if code, _, _ := runCmd(t, append([]string{"verify", "--from", end}, deployment...)...); code != exitDiffer {
		t.Errorf("verify against the stream's end: exit %d, want 1 (the restore stopped before it)", code)
	}
	if code, out, errs := runCmd(t, append(append([]string{"restore"}, deployment...), at...)...); code != exitError || !strings.Contains(errs, "is not empty") {
		t.Errorf("a second restore into the deployment: exit %d, want 2 (not empty)\n%s%s", code, out, errs)
	}
}

// TestRestoreAtDeletedSequences: --at-seq of a deleted event restores the
// state as of the last event held before it, found by sequence, also when
// the deleted one is the stream's last (whose lookup used to fail with
// exit 2, "message not found"); a sequence after the stream's end is bad
// input like one before its start: exit 1 naming the end.
func TestRestoreAtDeletedSequences(t *testing.T) {
	bus := testBus(t)
	h := pitrHistory(t, bus)
	nats := []string{"--nats", bus.URL()}
	mid, last := h.Phases[1].LastSeq, h.Phases[3].LastSeq
	for _, s := range []uint64{mid - 2, mid - 1, mid, last} {
		if err := bus.Stream.DeleteMsg(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ at, want uint64 }{{mid - 1, mid - 3}, {mid, mid - 3}, {last, last - 1}, {last - 1, last - 1}} {
		// The deleted events are holes (TestHolesInTheStreamAreNotIgnored):
		// refused without --accept-gap, which this checks the point of.
		if code, out, errs := runCmd(t, append([]string{"restore", "--to", t.TempDir(), "--at-seq", strconv.FormatUint(c.at, 10)}, nats...)...); code != exitDiffer {
			t.Errorf("restore --at-seq %d past deleted events: exit %d, want 1\n%s%s", c.at, code, out, errs)
		}
		code, out, errs := runCmd(t, append([]string{"restore", "--to", t.TempDir(), "--json", "--accept-gap", "--at-seq", strconv.FormatUint(c.at, 10)}, nats...)...)
		var sum restoreSummary
		if code != exitOK || json.Unmarshal([]byte(out), &sum) != nil || sum.Sequence != c.want {
			t.Errorf("restore --at-seq %d (deleted events %d..%d and %d): exit %d, stopped at %d, want 0 at %d\n%s%s", c.at, mid-2, mid, last, code, sum.Sequence, c.want, out, errs)
		}
	}
	beyond := strconv.FormatUint(last+1, 10)
	code, out, errs := runCmd(t, append([]string{"restore", "--to", t.TempDir(), "--at-seq", beyond}, nats...)...)
	if code != exitDiffer || !strings.Contains(errs, fmt.Sprintf("ends at sequence %d", last)) || len(strings.Split(strings.TrimSpace(errs), "\n")) != 1 {
		t.Errorf("restore --at-seq %s after the stream's end: exit %d, want 1 naming the end on one line\n%s%s", beyond, code, out, errs)
	}
}

// TestRestoreForceOnlyForward: --force resumes a restore at the same
// point or moves it to a later one, and then the sink holds the state as
// of that point; it cannot take a sink back to an earlier point (newer
// metas win, so a later state's metas and resources stay), which used to
// exit 0 saying "restored as of" the earlier point while the sink held
// the later state: now it exits 1 saying the sink holds a later state,
// whether a restore or run wrote it.
func TestRestoreForceOnlyForward(t *testing.T) {
	bus := testBus(t)
	h := pitrHistory(t, bus)
	nats := []string{"--nats", bus.URL()}
	restore := func(dir string, args ...string) (int, string, string) {
		return runCmd(t, append(append([]string{"restore", "--to", dir}, args...), nats...)...)
	}
	seq := func(phase int) string { return strconv.FormatUint(h.Phases[phase-1].LastSeq, 10) }
	ref := func(phase int) string {
		dir := filepath.Join(t.TempDir(), "reference")
		h.Reference(dir, phase)
		return dir
	}

	// Forward: as of phase 1, then phase 3 over it, then phase 3 again.
	fwd := filepath.Join(t.TempDir(), "forward")
	if code, out, errs := restore(fwd, "--at-seq", seq(1)); code != exitOK {
		t.Fatalf("restore as of phase 1: exit %d\n%s%s", code, out, errs)
	}
	for _, again := range []bool{false, true} {
		if code, out, errs := restore(fwd, "--force", "--at", h.Phases[2].LastTime.Format(time.RFC3339Nano)); code != exitOK {
			t.Errorf("restore --force as of phase 3 over phase 1 (again: %v): exit %d, want 0\n%s%s", again, code, out, errs)
		}
	}
	if !sameStores(t, ref(3), fwd) {
		t.Error("a sink restored as of phase 1, then with --force as of phase 3, differs from the reference as of phase 3")
	}

	// Back: as of the end, then phase 1 over it; and a sink run feeds.
	back := filepath.Join(t.TempDir(), "back")
	if code, out, errs := restore(back, "--at-seq", seq(4)); code != exitOK {
		t.Fatalf("restore as of the end: exit %d\n%s%s", code, out, errs)
	}
	live := t.TempDir()
	drain(t, bus, live)
	for _, c := range []struct{ dir, what string }{{back, "a sink restored as of the end"}, {live, "a sink run feeds"}} {
		code, out, errs := restore(c.dir, "--force", "--at", h.Phases[0].LastTime.Format(time.RFC3339Nano))
		if code != exitDiffer || !strings.Contains(errs, "does not hold the state as of sequence "+seq(1)) || !strings.Contains(errs, "empty sink") ||
			len(strings.Split(strings.TrimSpace(errs), "\n")) != 1 {
			t.Errorf("restore --force as of phase 1 into %s: exit %d, want 1 saying it holds a later state, on one line\n%s%s", c.what, code, out, errs)
		}
	}
	if sameStores(t, ref(1), back) {
		t.Error("the sink restored as of the end holds the state as of phase 1: the check above could not fail")
	}
}

// plant writes records straight into the disk tree at dir, as something
// other than the stream did: a restore killed before it wrote the metas
// of its last batch, or another deployment.
func plant(t *testing.T, dir string, write func(ctx context.Context, snk sink.Sink) error) {
	t.Helper()
	ctx := t.Context()
	snk, err := sink.Open(ctx, "disk:"+dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, snk); err != nil {
		t.Fatal(err)
	}
	if err := snk.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := snk.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreForceFindsExtraRevisionsAndBlobs (issue 33 item 2): a
// forced restore to an earlier point over a tree holding revisions or
// blobs no event up to that point wrote (a restore to a later point
// killed mid-batch, its revisions written and its metas not; another
// deployment's tree with older metas and a revision of its own; a blob
// of its own) used to exit 0 claiming the point, since only metas were
// checked: it exits 1 naming what is extra. A tree holding only what the
// events wrote is restored (exit 0) and equals the reference.
func TestRestoreForceFindsExtraRevisionsAndBlobs(t *testing.T) {
	bus := testBus(t)
	h := pitrHistory(t, bus)
	nats := []string{"--nats", bus.URL()}
	seq := func(phase int) string { return strconv.FormatUint(h.Phases[phase-1].LastSeq, 10) }
	foreignBlob := []byte("a blob of another deployment")
	for _, c := range []struct {
		name  string
		phase int // restored (the tree first, then --force) as of this phase
		plant func(ctx context.Context, snk sink.Sink) error
		says  string // in the refusal; "" when the restore must succeed
	}{
		{"nothing extra", 1, func(context.Context, sink.Sink) error { return nil }, ""},
		{"revisions of a later restore killed before its metas", 1, func(ctx context.Context, snk sink.Sink) error {
			for _, it := range h.Phases[1].Items {
				if r, ok := it.Rec.(*events.RevisionRecord); ok {
					res, err := r.Resource()
					if err != nil {
						return err
					}
					if _, err := snk.ApplyRevision(ctx, it.Model, res); err != nil {
						return err
					}
				}
			}
			return nil
		}, "6 revisions that no event up to it wrote (issue/issue:0 revision issue:0:2)"},
		{"another deployment's older meta and extra revision", 2, func(ctx context.Context, snk sink.Sink) error {
			at := events.Time{Time: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
			info := events.RevisionInfo{UID: "00000099-0000-4000-8000-000000000009", ResourceID: "issue:0", RevisionID: "issue:0:9",
				ParentRevisionID: events.Null[string](), SchemaVersion: events.Null[string](), Status: "stable",
				CreatedTime: at, UpdatedTime: at, CreatedBy: "other", UpdatedBy: "other"}
			if _, err := snk.ApplyRevision(ctx, "issue", &events.RawResource{Info: info, RawData: []byte{0x80}}); err != nil {
				return err
			}
			_, err := snk.ApplyMeta(ctx, "issue", &events.ResourceMeta{CurrentRevisionID: "issue:0:9", ResourceID: "issue:0",
				SchemaVersion: events.Null[string](), TotalRevisionCount: 9, CreatedTime: at, UpdatedTime: at, CreatedBy: "other", UpdatedBy: "other"})
			return err
		}, "1 revisions that no event up to it wrote (issue/issue:0 revision issue:0:9)"},
		{"a blob of its own", 2, func(ctx context.Context, snk sink.Sink) error {
			_, err := snk.ApplyBlob(ctx, dedup.FileID(foreignBlob), int64(len(foreignBlob)), "text/plain", bytes.NewReader(foreignBlob))
			return err
		}, "1 blobs that no event up to it wrote (blob " + dedup.FileID(foreignBlob) + ")"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "restored")
			if code, out, errs := runCmd(t, append([]string{"restore", "--to", dir, "--at-seq", seq(c.phase)}, nats...)...); code != exitOK {
				t.Fatalf("restore as of phase %d: exit %d\n%s%s", c.phase, code, out, errs)
			}
			plant(t, dir, c.plant)
			code, out, errs := runCmd(t, append([]string{"restore", "--to", dir, "--force", "--at", h.Phases[c.phase-1].LastTime.Format(time.RFC3339Nano)}, nats...)...)
			if c.says == "" {
				ref := filepath.Join(t.TempDir(), "reference")
				h.Reference(ref, c.phase)
				if code != exitOK || !sameStores(t, ref, dir) {
					t.Errorf("restore --force as of phase %d over that phase's restore: exit %d, want 0 and the reference's state\n%s%s", c.phase, code, out, errs)
				}
				return
			}
			if code != exitDiffer || !strings.Contains(errs, "does not hold the state as of sequence "+seq(c.phase)) || !strings.Contains(errs, c.says) {
				t.Errorf("restore --force as of phase %d over a tree holding %s: exit %d, want 1 saying %q\n%s%s", c.phase, c.name, code, c.says, out, errs)
			}
		})
	}
}

// TestRestoreRacingRun (issue 33 item 3): a restore and a live run
// started together on one empty sink used to both write (Postgres, S3),
// and the restore exited 0 "as of" its point while the sink held the
// run's later state. Now one of them holds the sink (Postgres: an
// advisory lock; the all-S3 factory: a lease object): either the restore
// exits 0 and the sink holds exactly the state as of its point (the run
// refused, naming the restore), or the restore is refused naming the run
// (and the run feeds the sink). Never both.
func TestRestoreRacingRun(t *testing.T) {
	bus := testBus(t)
	h := pitrHistory(t, bus)
	ref := filepath.Join(t.TempDir(), "reference")
	h.Reference(ref, 1)
	srv := s3test.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	for _, backend := range []struct {
		name string
		// sinks gives the restore's and the run's sink flags, and the
		// restored sink as verify's --from flags.
		sinks                func(t *testing.T) (restored, run, from []string)
		restoreSays, runSays string // how a refusal names the holder
	}{
		{
			name: "postgres",
			sinks: func(t *testing.T) (restored, run, from []string) {
				pg := pgtest.SharedDSN() + "&table_prefix=" + pgtest.Prefix(t) + "&revisions=true"
				// Each its own blob directory: a disk tree's lock would decide the race.
				blobs := "disk:" + t.TempDir()
				return []string{"--meta", pg, "--resources", pg, "--blobs", blobs},
					[]string{"--meta", pg, "--resources", pg, "--blobs", "disk:" + t.TempDir()},
					[]string{"--from-meta", pg, "--from-resources", pg, "--from-blobs", blobs}
			},
			restoreSays: "(restore, exclusive)", runSays: "(writer)",
		},
		{
			name: "s3 factory",
			sinks: func(t *testing.T) (restored, run, from []string) {
				bucket := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name()))
				srv.CreateBucket(t, bucket)
				factory := benchS3URL(srv, bucket, "app/") + "&factory=s3"
				return []string{"--to", factory}, []string{"--to", factory}, []string{"--from", factory}
			},
			restoreSays: "(restore on ", runSays: "(writer on ",
		},
	} {
		t.Run(backend.name, func(t *testing.T) {
			won := map[string]int{}
			for round := range 3 {
				t.Run(fmt.Sprintf("round %d", round+1), func(t *testing.T) {
					restored, runSinks, from := backend.sinks(t)
					raceRestoreAndRun(t, bus, h, ref, restored, runSinks, from, backend.restoreSays, backend.runSays, won)
				})
			}
			t.Logf("rounds won: %v", won)
		})
	}
}

// raceRestoreAndRun starts a run and a restore as of phase 1 together
// and checks that one of them held the sink (see TestRestoreRacingRun).
func raceRestoreAndRun(t *testing.T, bus *stream.Bus, h *streamhistory.History, ref string, restored, runSinks, from []string, restoreSays, runSays string, won map[string]int) {
	t.Helper()
	nats := []string{"--nats", bus.URL()}
	type result struct {
		code      int
		out, errs string
	}
	runDone := make(chan result, 1)
	go func() {
		code, out, errs := runCmd(t, append(append([]string{"run", "--until-drained", "--listen", ""}, runSinks...), nats...)...)
		runDone <- result{code, out, errs}
	}()
	code, out, errs := runCmd(t, append(append([]string{"restore", "--at-seq", strconv.FormatUint(h.Phases[0].LastSeq, 10)}, restored...), nats...)...)
	r := <-runDone
	switch {
	case code == exitOK && r.code == exitOK:
		t.Errorf("restore and run on one sink both exited 0: the restore claims a point while the run wrote a later state\nrestore: %s%s\nrun: %s%s", out, errs, r.out, r.errs)
	case code == exitOK:
		won["restore"]++
		if !strings.Contains(r.errs, "held by another process") || !strings.Contains(r.errs, restoreSays) {
			t.Errorf("run refused while a restore held the sink: exit %d, want it naming the restore (%q)\n%s%s", r.code, restoreSays, r.out, r.errs)
		}
		if c, o, _ := runCmd(t, append([]string{"verify", "--from", ref}, restored...)...); c != exitOK {
			t.Errorf("the restored sink lacks the state as of phase 1: verify exit %d\n%s", c, o)
		}
		if c, o, _ := runCmd(t, append(append([]string{"verify"}, from...), "--to", ref)...); c != exitOK {
			t.Errorf("the restored sink holds more than the state as of phase 1: verify exit %d\n%s", c, o)
		}
	default:
		won["run"]++
		// Either the restore met the run's lease, or the run was done
		// (and its lease gone) before the restore looked: then the sink
		// it finds holds the run's metas and is refused for that.
		held := strings.Contains(errs, "held by another process") && strings.Contains(errs, runSays)
		after := strings.Contains(errs, "is not empty")
		if code != exitError || !held && !after {
			t.Errorf("restore while a run held the sink: exit %d, want 2 naming the run (%q) or the sink it left not empty\n%s%s", code, runSays, out, errs)
		}
		if r.code != exitOK {
			t.Errorf("the run that held the sink: exit %d\n%s%s", r.code, r.out, r.errs)
		}
	}
}
