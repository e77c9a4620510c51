package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testfixtures"
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
	if code, out, _ := runCmd(t, "verify", "--archive", archive, "--sink", dir); code != exitFailed {
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
	if code != exitOK {
		t.Fatalf("reconcile --dry-run: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "missing from the sink: to publish") || !strings.Contains(out, "dry run: 0 records published") || strings.Contains(out, " 0 differences") {
		t.Fatalf("reconcile --dry-run:\n%s", out)
	}
	if after := streamMsgs(t, bus); after != before {
		t.Fatalf("--dry-run changed the stream: %d messages, then %d", before, after)
	}
	if code, _, _ := runCmd(t, "verify", "--archive", archive, "--sink", dir); code != exitFailed {
		t.Fatalf("after --dry-run, verify: exit %d, want the sink still different", code)
	}
}

// TestReconcileEqualStores: reconcile of a 100,000-revision archive with
// its mirror finds nothing and publishes nothing.
func TestReconcileEqualStores(t *testing.T) {
	if testing.Short() {
		t.Skip("mirrors 100,000 revisions")
	}
	archive := catchUpArchive(t)
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
	if publishedCount(t, out) != 0 || !strings.Contains(out, "100000 revisions") || !strings.Contains(out, " 0 differences") {
		t.Fatalf("reconcile of equal stores:\n%s", out)
	}
	if after := streamMsgs(t, bus); after != before {
		t.Fatalf("reconcile of equal stores changed the stream: %d messages, then %d", before, after)
	}
	t.Logf("%s", out)
}
