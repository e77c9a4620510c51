package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/postgres"
	"github.com/specstar/replicator/stream"
)

func streamMsgs(t *testing.T, bus *stream.Bus) uint64 {
	t.Helper()
	info, err := bus.Stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

var publishedRE = regexp.MustCompile(`(?m)^(\d+) records published .*; (\d+) dropped as duplicates`)

// publishedCount reads "N records published (...; D dropped as
// duplicates)" from reconcile's output and returns N-D, the messages the
// stream gained (an archive may hold a record twice; JetStream keeps one).
func publishedCount(t *testing.T, out string) int {
	t.Helper()
	m := publishedRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no published count in:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	d, _ := strconv.Atoi(m[2])
	return n - d
}

// TestReconcileRepairsPurgedRange: a sink misses a range of events that
// retention removed before it saw them; reconcile reports the differences
// and publishes exactly those records, run applies them, verify is equal,
// and a second reconcile has nothing to do.
func TestReconcileRepairsPurgedRange(t *testing.T) {
	ctx := context.Background()
	bus := testBus(t)
	dir := t.TempDir()
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	drain(t, bus, dir)
	archive := testfixtures.Path(t, "msgpack.acbak")
	replay(t, bus, archive)
	if err := bus.Stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCmd(t, "verify", "--archive", archive, "--sink", dir); code != exitDiffer {
		t.Fatalf("before reconcile, verify: exit %d\n%s", code, out)
	}

	code, out, errs := runCmd(t, "reconcile", "--archive", archive, "--sink", dir, "--nats", bus.URL())
	if code != exitOK {
		t.Fatalf("reconcile: exit %d\n%s%s", code, out, errs)
	}
	n := publishedCount(t, out)
	if n == 0 || !strings.Contains(out, "missing from the sink: published") {
		t.Fatalf("reconcile published %d records:\n%s", n, out)
	}
	if got := streamMsgs(t, bus); got != uint64(n) {
		t.Fatalf("stream holds %d messages after the purge and reconcile, want %d", got, n)
	}
	t.Logf("reconcile:\n%s", out)

	code, out, errs = runCmd(t, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--accept-gap", "--sink", dir)
	if code != exitOK {
		t.Fatalf("run --accept-gap: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := runCmd(t, "verify", "--archive", archive, "--sink", dir); code != exitOK || !strings.Contains(out, ": equal:") {
		t.Fatalf("after reconcile and run, verify: exit %d\n%s", code, out)
	}
	// The records of small.acbak are still there too.
	if code, out, _ := runCmd(t, "verify", "--archive", testfixtures.Path(t, "small.acbak"), "--sink", dir); code != exitOK {
		t.Fatalf("small.acbak no longer verifies: exit %d\n%s", code, out)
	}

	before := streamMsgs(t, bus)
	code, out, errs = runCmd(t, "reconcile", "--archive", archive, "--sink", dir, "--nats", bus.URL())
	if code != exitOK || publishedCount(t, out) != 0 || !strings.Contains(out, " 0 differences") {
		t.Fatalf("second reconcile: exit %d\n%s%s", code, out, errs)
	}
	if after := streamMsgs(t, bus); after != before {
		t.Fatalf("second reconcile changed the stream: %d messages, then %d", before, after)
	}
}

// TestReconcileDryRun: --dry-run reports the differences and publishes
// nothing.
func TestReconcileDryRun(t *testing.T) {
	bus := testBus(t)
	dir := t.TempDir()
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	drain(t, bus, dir)
	before := streamMsgs(t, bus)
	archive := testfixtures.Path(t, "msgpack.acbak")
	code, out, errs := runCmd(t, "reconcile", "--archive", archive, "--sink", dir, "--nats", bus.URL(), "--dry-run")
	if code != exitDiffer {
		t.Fatalf("reconcile --dry-run: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "missing from the sink: to publish") || !strings.Contains(out, "dry run: 0 records published") || strings.Contains(out, " 0 differences") {
		t.Fatalf("reconcile --dry-run:\n%s", out)
	}
	if after := streamMsgs(t, bus); after != before {
		t.Fatalf("--dry-run changed the stream: %d messages, then %d", before, after)
	}
	if code, _, _ := runCmd(t, "verify", "--archive", archive, "--sink", dir); code != exitDiffer {
		t.Fatalf("after --dry-run, verify: exit %d, want the sink still different", code)
	}
}

// TestReconcileEqualStores: reconcile of a synthetic archive (100,000
// revisions in the long suite) with its mirror finds nothing and
// publishes nothing.
func TestReconcileEqualStores(t *testing.T) {
	if testing.Short() {
		t.Skip("mirrors a synthetic archive")
	}
	resources := backlogResources()
	archive := catchUpArchive(t, resources)
	dir := t.TempDir()
	if code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", "disk:"+dir+"?sync=batch"); code != exitOK {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	before := streamMsgs(t, bus)
	code, out, errs := runCmd(t, "reconcile", "--archive", archive, "--sink", dir, "--nats", bus.URL(), "--dry-run=false")
	if code != exitOK {
		t.Fatalf("reconcile: exit %d\n%s%s", code, out, errs)
	}
	if publishedCount(t, out) != 0 || !strings.Contains(out, fmt.Sprintf("%d revisions", resources*10)) || !strings.Contains(out, " 0 differences") {
		t.Fatalf("reconcile of equal stores:\n%s", out)
	}
	if after := streamMsgs(t, bus); after != before {
		t.Fatalf("reconcile of equal stores changed the stream: %d messages, then %d", before, after)
	}
	t.Logf("%s", out)
}

// extraResource is a resource only the sink holds: its meta and revisions.
type extraResource struct {
	model string
	meta  *events.ResourceMeta
	revs  []*events.RawResource
}

func mustTime(t *testing.T, s string) events.Time {
	t.Helper()
	tm, err := events.ParseTime(s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// extraResources are three resources small.acbak does not hold, in both
// of its models, updated before its newest change (2024-03-01T12:00): one
// with two revisions, one with a unicode id.
func extraResources(t *testing.T) []extraResource {
	t.Helper()
	mk := func(model, rid, updated string, nrev int, uidBase int) extraResource {
		x := extraResource{model: model}
		for i := 1; i <= nrev; i++ {
			data := fmt.Sprintf(`{"title":"extra %s %d"}`, rid, i)
			x.revs = append(x.revs, &events.RawResource{
				Info: events.RevisionInfo{
					UID:                 fmt.Sprintf("%08d-0000-4000-8000-000000000000", uidBase+i),
					ResourceID:          rid,
					RevisionID:          fmt.Sprintf("%s:%d", rid, i),
					ParentRevisionID:    events.Null[string](),
					ParentSchemaVersion: events.Null[string](),
					SchemaVersion:       events.Null[string](),
					DataHash:            events.Some(dedup.DataHash([]byte(data))),
					Status:              "stable",
					CreatedTime:         mustTime(t, "2024-01-01T00:00:00Z"),
					UpdatedTime:         mustTime(t, updated),
					CreatedBy:           "mallory",
					UpdatedBy:           "mallory",
				},
				RawData: []byte(data),
			})
		}
		x.meta = &events.ResourceMeta{
			CurrentRevisionID:  fmt.Sprintf("%s:%d", rid, nrev),
			ResourceID:         rid,
			SchemaVersion:      events.Null[string](),
			TotalRevisionCount: int64(nrev),
			CreatedTime:        mustTime(t, "2024-01-01T00:00:00Z"),
			UpdatedTime:        mustTime(t, updated),
			CreatedBy:          "mallory",
			UpdatedBy:          "mallory",
			IndexedData:        events.Some[events.Value](events.Map{{Key: "title", Value: "extra"}}),
		}
		return x
	}
	return []extraResource{
		mk("issue", "issue:extra-1", "2024-02-01T10:00:00Z", 2, 10),
		mk("issue", "issue:extra-ü", "2024-02-02T10:00:00", 1, 20),
		mk("user", "user:mallory", "2024-02-03T10:00:00Z", 1, 30),
	}
}

// extraApplier is what the tests need of a sink to plant extra resources.
type extraApplier interface {
	ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (sink.Outcome, error)
	ApplyRevision(ctx context.Context, model string, res *events.RawResource) (sink.Outcome, error)
	Flush(ctx context.Context) error
}

func plantExtras(t *testing.T, s extraApplier, extras []extraResource) {
	t.Helper()
	ctx := context.Background()
	for _, x := range extras {
		for _, r := range x.revs {
			if _, err := s.ApplyRevision(ctx, x.model, r); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.ApplyMeta(ctx, x.model, x.meta); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

var pruneLineRE = regexp.MustCompile(`(?m)^prune: model "([^"]*)" resource "([^"]*)" only in the sink [^\n]*: (to purge|purge published|left alone)$`)

// pruned returns "model/resource" of every resource reconcile --prune
// reported only in the sink with the given action, sorted.
func pruned(out, action string) []string {
	var got []string
	for _, m := range pruneLineRE.FindAllStringSubmatch(out, -1) {
		if m[3] == action {
			got = append(got, m[1]+"/"+m[2])
		}
	}
	slices.Sort(got)
	return got
}

func extraNames(extras []extraResource) []string {
	var names []string
	for _, x := range extras {
		names = append(names, x.model+"/"+x.meta.ResourceID)
	}
	slices.Sort(names)
	return names
}

// sinkHolds reports which of the extras' metas and revisions a sink still
// holds.
func sinkHolds(t *testing.T, r sink.Reader, extras []extraResource) []string {
	t.Helper()
	ctx := context.Background()
	var held []string
	for _, x := range extras {
		if _, err := r.Meta(ctx, x.model, x.meta.ResourceID); err == nil {
			held = append(held, "meta "+x.meta.ResourceID)
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		for _, rev := range x.revs {
			i := rev.Info
			if _, _, err := r.Revision(ctx, x.model, i.ResourceID, i.RevisionID, i.SchemaVersion); err == nil {
				held = append(held, "revision "+i.RevisionID)
			} else if !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	return held
}

// checkPrune is the prune scenario on a sink that mirrors small.acbak and
// holds the extras besides, fed by bus: --dry-run reports exactly the
// extras and publishes nothing; --prune publishes one purge each; run
// applies them, the extras are gone and the archive's resources verify
// equal; a second --prune finds nothing.
func checkPrune(t *testing.T, bus *stream.Bus, sinkURL string, reader func() sink.Reader, extras []extraResource) {
	t.Helper()
	archive := testfixtures.Path(t, "small.acbak")
	want := extraNames(extras)
	if held := sinkHolds(t, reader(), extras); len(held) != 7 {
		t.Fatalf("the sink holds %q of the extras before the prune, want 3 metas and 4 revisions", held)
	}

	before := streamMsgs(t, bus)
	code, out, errs := runCmd(t, "reconcile", "--archive", archive, "--sink", sinkURL, "--prune", "--dry-run")
	if code != exitDiffer {
		t.Fatalf("reconcile --prune --dry-run: exit %d\n%s%s", code, out, errs)
	}
	if got := pruned(out, "to purge"); !slices.Equal(got, want) || !strings.Contains(out, " 0 differences") ||
		!strings.Contains(out, ", 3 only in the sink, 3 to purge, 0 left alone") || !strings.Contains(out, "dry run: 0 records published") {
		t.Fatalf("reconcile --prune --dry-run reported %q, want %q:\n%s", got, want, out)
	}
	if after := streamMsgs(t, bus); after != before {
		t.Fatalf("--dry-run changed the stream: %d messages, then %d", before, after)
	}

	code, out, errs = runCmd(t, "reconcile", "--archive", archive, "--sink", sinkURL, "--prune", "--nats", bus.URL())
	if code != exitOK {
		t.Fatalf("reconcile --prune: exit %d\n%s%s", code, out, errs)
	}
	if got := pruned(out, "purge published"); !slices.Equal(got, want) || publishedCount(t, out) != 3 || !strings.Contains(out, ", 3 purges;") {
		t.Fatalf("reconcile --prune published %q, want %q:\n%s", got, want, out)
	}
	if after := streamMsgs(t, bus); after != before+3 {
		t.Fatalf("reconcile --prune: the stream went from %d to %d messages, want 3 more", before, after)
	}
	t.Logf("reconcile --prune:\n%s", out)

	if out := drain(t, bus, sinkURL); !strings.Contains(out, " 0 dead-lettered") {
		t.Fatalf("run: %s", out)
	}
	if held := sinkHolds(t, reader(), extras); len(held) != 0 {
		t.Fatalf("after the purges, the sink still holds %q", held)
	}
	if code, out, _ := runCmd(t, "verify", "--archive", archive, "--sink", sinkURL); code != exitOK || !strings.Contains(out, ": equal:") {
		t.Fatalf("after the prune, verify: exit %d\n%s", code, out)
	}

	before = streamMsgs(t, bus)
	code, out, errs = runCmd(t, "reconcile", "--archive", archive, "--sink", sinkURL, "--prune", "--nats", bus.URL())
	if code != exitOK || publishedCount(t, out) != 0 || !strings.Contains(out, "prune: 6 sink resources checked in 2 models, 0 only in the sink, 0 to purge, 0 left alone") {
		t.Fatalf("second reconcile --prune: exit %d\n%s%s", code, out, errs)
	}
	if after := streamMsgs(t, bus); after != before {
		t.Fatalf("second reconcile --prune changed the stream: %d messages, then %d", before, after)
	}
}

// TestReconcilePruneDisk: a disk sink (a mirror of small.acbak) holding
// three resources the archive does not.
func TestReconcilePruneDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	archive := testfixtures.Path(t, "small.acbak")
	if code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", dir); code != exitOK {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	d, err := disk.Open(ctx, dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	extras := extraResources(t)
	plantExtras(t, d, extras)
	// The tree takes one writer, `replicator run` below: read it back
	// through read-only opens.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	reader := func() sink.Reader {
		r, err := disk.Open(ctx, dir, disk.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	checkPrune(t, testBus(t), dir, reader, extras)
	// Nothing of the extras is left on disk: no meta file, no index entry.
	for _, x := range extras {
		for _, p := range []string{
			filepath.Join(dir, x.model, "meta", x.meta.ResourceID+".data"),
			filepath.Join(dir, x.model, "data", "resource", x.meta.ResourceID),
		} {
			if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s is still there (%v)", p, err)
			}
		}
	}
}

// TestReconcilePrunePostgres: a Postgres sink (metas and revisions) fed
// small.acbak through the stream, holding three resources it does not.
func TestReconcilePrunePostgres(t *testing.T) {
	ctx := context.Background()
	_, prefix := pgTables(t, "rcp")
	pgURL := pgDSN() + pgSep() + "table_prefix=" + prefix + "&revisions=true"
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	drain(t, bus, pgURL)
	spec, err := postgres.ParseSpec(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := spec.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	extras := extraResources(t)
	plantExtras(t, p, extras)
	checkPrune(t, bus, pgURL, func() sink.Reader { return p }, extras)
}

// TestReconcilePruneLeavesAlone: what --prune does not purge, reported as
// left alone: a resource updated after the source's newest change (it may
// have been made after the source was read), and a model the source holds
// nothing of, unless the sink URL names it in models=.
func TestReconcilePruneLeavesAlone(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the source index goes, and must be gone from
	dir := t.TempDir()
	archive := testfixtures.Path(t, "small.acbak")
	if code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", dir); code != exitOK {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	d, err := disk.Open(ctx, dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	x := extraResources(t)
	newer, other := x[0], x[2]
	newer.meta.UpdatedTime = mustTime(t, "2024-03-01T12:00:01Z") // the archive's newest change is 12:00:00.654321
	other.model = "other"
	plantExtras(t, d, []extraResource{newer, other})

	code, out, errs := runCmd(t, "reconcile", "--archive", archive, "--sink", dir, "--prune", "--dry-run")
	if code != exitOK {
		t.Fatalf("reconcile --prune --dry-run: exit %d\n%s%s", code, out, errs)
	}
	if got := pruned(out, "left alone"); !slices.Equal(got, []string{"issue/issue:extra-1"}) ||
		!strings.Contains(out, `prune: model "other": the source holds none of its resources: left alone`) ||
		!strings.Contains(out, "prune: 7 sink resources checked in 2 models, 1 only in the sink, 0 to purge, 2 left alone") {
		t.Fatalf("reconcile --prune --dry-run:\n%s", out)
	}
	// Named in models=, the model is pruned.
	code, out, errs = runCmd(t, "reconcile", "--archive", archive, "--sink", dir+"?models=other,issue", "--prune", "--dry-run")
	if code != exitDiffer || !slices.Equal(pruned(out, "to purge"), []string{"other/user:mallory"}) {
		t.Fatalf("reconcile --prune --dry-run, models=other,issue: exit %d\n%s%s", code, out, errs)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Fatalf("the source index was not removed: %v, %v", left, err)
	}
}
