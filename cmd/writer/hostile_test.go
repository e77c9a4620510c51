package main

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/stream"
)

// TestReplayKeepsTheStreamsSettings (issue 12, items 1 and 3): `writer
// replay` called create-or-update with its own defaults, so it reset the
// max-age and duplicate window `replicator run` had set, and could not
// publish at all to a stream made with --retention workqueue ("can not
// change retention policy"). Now it publishes to the stream as it is.
func TestReplayKeepsTheStreamsSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	bus, err := stream.Open(ctx, stream.Config{DataDir: dir, Retention: "workqueue", MaxAge: 2 * time.Hour,
		DuplicateWindow: 10 * time.Minute, Given: map[string]bool{"retention": true, "max-age": true, "duplicate-window": true}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()

	code, out, errs := runWriter(t, "replay", testfixtures.Path(t, "small.acbak"), "--nats", bus.URL())
	if code != exitOK {
		t.Fatalf("replay onto a workqueue stream: exit %d\n%s%s", code, out, errs)
	}
	info, err := bus.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.MaxAge != 2*time.Hour || c.Duplicates != 10*time.Minute || c.Retention.String() != "WorkQueue" {
		t.Fatalf("replay changed the stream: max age %v, duplicate window %v, retention %v", c.MaxAge, c.Duplicates, c.Retention)
	}
	if info.State.Msgs != 16 {
		t.Fatalf("the stream holds %d events, want small.acbak's 16", info.State.Msgs)
	}
	// Given explicitly and different: refused, naming the setting.
	code, _, errs = runWriter(t, "replay", testfixtures.Path(t, "small.acbak"), "--nats", bus.URL(), "--duplicate-window", "1h")
	if code == exitOK || !strings.Contains(errs, "duplicate-window") {
		t.Fatalf("replay with a differing --duplicate-window: exit %d, %s", code, errs)
	}
}

// TestReplayPublishesNothingFromABadArchive (issue 12, item 18): `writer
// replay` published records before it knew the archive was valid, so a
// truncated archive left 1,214 events on the stream. It now checks the
// whole archive first and publishes nothing from one `writer verify`
// rejects; --no-check keeps the old streaming behaviour.
func TestReplayPublishesNothingFromABadArchive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := testfixtures.Read(t, "medium.acbak")
	truncated := filepath.Join(t.TempDir(), "truncated.acbak")
	if err := os.WriteFile(truncated, data[:len(data)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	msgs := func(bus *stream.Bus) uint64 {
		t.Helper()
		info, err := bus.Stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	code, _, errs := runWriter(t, "replay", truncated, "--nats", bus.URL())
	if code == exitOK || !strings.Contains(errs, "nothing was published") {
		t.Fatalf("replay of a truncated archive: exit %d, %s", code, errs)
	}
	if n := msgs(bus); n != 0 {
		t.Fatalf("a rejected archive left %d events on the stream", n)
	}
	// Streaming without the check publishes what comes before the fault.
	if code, _, _ := runWriter(t, "replay", truncated, "--nats", bus.URL(), "--no-check"); code == exitOK {
		t.Fatal("replay --no-check of a truncated archive succeeded")
	}
	if n := msgs(bus); n == 0 {
		t.Fatal("replay --no-check published nothing: the test's archive is not truncated where it should be")
	}
}

func runWriterWithin(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	if ctx.Err() != nil {
		t.Fatalf("writer %v did not end within %v (exit %d):\n%s%s", args[0], d, code, out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

func testStream(t *testing.T) *stream.Bus {
	t.Helper()
	bus, err := stream.Open(context.Background(), stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	return bus
}

func deploymentAt(t *testing.T, dsn, stem string) (*specstarpg.Writer, string) {
	t.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("%s_%d_", stem, time.Now().UnixNano()%1_000_000_000)
	w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", dsn, err)
	}
	t.Cleanup(func() { w.DropAll(context.Background()); w.Close() })
	if err := w.CreateModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		rid := fmt.Sprintf("issue:%d", i)
		if _, err := w.Create(ctx, "issue", rid, payload(rid, i), specstarpg.Write{}); err != nil {
			t.Fatal(err)
		}
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return w, dsn + sep + "table_prefix=" + prefix
}

func TestLogicalTailStopsOnReplicaServer(t *testing.T) {
	_, from := deploymentAt(t, pgDSN(), "replica")
	bus := testStream(t)
	code, out, errs := runWriterWithin(t, 45*time.Second, "tail", "--mode", "logical", "--from", from, "--nats", bus.URL(), "--listen", "")
	if code != exitDiffer || !strings.Contains(errs, "wal_level=replica") {
		t.Fatalf("tail --mode logical on a wal_level=replica server: exit %d, want 1 (issue 26 item 14: the README's code for a permanent condition) naming wal_level\n%s%s", code, out, errs)
	}
	t.Logf("exit %d: %s", code, strings.TrimSpace(errs[strings.LastIndex(errs, "writer tail:"):]))
}

func TestLogicalTailStopsOnPermanentConditions(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.LogicalCluster(t)
	bus := testStream(t)
	tail := func(from string) (int, string) {
		t.Helper()
		code, out, errs := runWriterWithin(t, 45*time.Second, "tail", "--mode", "logical", "--from", from, "--nats", bus.URL(), "--listen", "")
		return code, out + errs
	}

	// No meta table under the prefix.
	code, out := tail(dsn + "&table_prefix=nothing_here_")
	if code != exitDiffer || !strings.Contains(out, "no meta tables") {
		t.Fatalf("tail of a prefix without tables: exit %d, want 1 naming the missing tables\n%s", code, out)
	}

	// A user who may read the tables but not replicate.
	_, from := deploymentAt(t, dsn, "norepl")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE ROLE norepl LOGIN NOREPLICATION`,
		`GRANT SELECT ON ALL TABLES IN SCHEMA public TO norepl`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	code, out = tail(strings.Replace(from, "postgres@", "norepl@", 1))
	if code != exitDiffer || !strings.Contains(out, "REPLICATION") {
		t.Fatalf("tail as a user without REPLICATION: exit %d, want non-zero naming the attribute\n%s", code, out)
	}
	var pubs, slots int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_publication), (SELECT count(*) FROM pg_replication_slots)`).Scan(&pubs, &slots); err != nil {
		t.Fatal(err)
	}
	if pubs != 0 || slots != 0 {
		t.Errorf("the refused tails left %d publications and %d slots behind", pubs, slots)
	}
}

func startTail(t *testing.T, args ...string) (stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		var out, errb bytes.Buffer
		run(ctx, append([]string{"tail"}, args...), &out, &errb)
		done <- out.String() + errb.String()
	}()
	var once sync.Once
	var printed string
	stop = func() string {
		once.Do(func() { cancel(); printed = <-done })
		return printed
	}
	t.Cleanup(func() { stop() })
	return stop
}

func waitMsgs(t *testing.T, bus *stream.Bus, n uint64, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if info, err := bus.Stream.Info(context.Background()); err == nil && info.State.Msgs >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tail never published %s", what)
		}
	}
}

func TestPollTailPublishesPurges(t *testing.T) {
	ctx := context.Background()
	w, from := deploymentAt(t, pgDSN(), "pollpurge")
	bus := testStream(t)
	stop := startTail(t, "--mode", "poll", "--from", from, "--nats", bus.URL(), "--interval", "100ms",
		"--purge-check", "300ms", "--listen", "")
	waitMsgs(t, bus, 6, "its snapshot (3 metas, 3 revisions)")
	// A change the poller publishes: after it, issue:2 is known to it.
	if _, err := w.Update(ctx, "issue", "issue:2", payload("changed", 9), specstarpg.Write{}); err != nil {
		t.Fatal(err)
	}
	waitMsgs(t, bus, 8, "the update (its meta and new revision)")
	// SpecStar's permanent delete: the meta row and the resource's index rows.
	conn, err := pgx.Connect(ctx, pgDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`DELETE FROM ` + pgx.Identifier{w.MetaTable("issue")}.Sanitize() + ` WHERE resource_id = 'issue:2'`,
		`DELETE FROM ` + pgx.Identifier{w.IndexTable()}.Sanitize() + ` WHERE resource_id = 'issue:2'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	repl := buildBinary(t, "../replicator")
	mirror := t.TempDir()
	gone := filepath.Join(mirror, "issue", "meta", "issue:2.data")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", mirror).CombinedOutput(); err != nil {
			t.Fatalf("replicator run: %v\n%s", err, out)
		}
		if _, err := os.Stat(gone); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the delete the mirror still holds issue:2 (no purge published)\ntail: %s", stop())
		}
	}
	for _, rid := range []string{"issue:1", "issue:3"} {
		if _, err := os.Stat(filepath.Join(mirror, "issue", "meta", rid+".data")); err != nil {
			t.Errorf("%s was removed from the mirror too: %v", rid, err)
		}
	}
	if out, err := exec.Command(repl, "verify", "--source", from, "--sink", mirror).CombinedOutput(); err != nil || !bytes.Contains(out, []byte(": equal:")) {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	if out := stop(); !strings.Contains(out, "(poll) stopped") {
		t.Fatalf("tail: %s", out)
	}
}

func logged(t *testing.T, out, msgSuffix, key string) int64 {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if !strings.Contains(l, msgSuffix+`"`) {
			continue
		}
		_, rest, ok := strings.Cut(l, " "+key+"=")
		if !ok {
			break
		}
		v, _, _ := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q in %s", key, v, l)
		}
		return n
	}
	t.Fatalf("no %q line with %s= in:\n%s", msgSuffix, key, out)
	return 0
}

func TestFinalCountsAgree(t *testing.T) {
	_, from := deploymentAt(t, pgDSN(), "counts")
	from += "&blobs=" + t.TempDir() // a DiskBlobStore (empty: no payload references a blob)
	bus := testStream(t)
	// -v: the progress lines are INFO logs, shown only when asked for.
	stop := startTail(t, "--mode", "poll", "--from", from, "--nats", bus.URL(), "--interval", "100ms", "--listen", "", "-v")
	waitMsgs(t, bus, 6, "its snapshot (3 metas, 3 revisions)")
	out := stop()
	var published int64
	if _, err := fmt.Sscanf(out[strings.Index(out, "stopped: ")+len("stopped: "):], "%d events published", &published); err != nil || published != 6 {
		t.Fatalf("tail summary: %v\n%s", err, out)
	}
	if got := logged(t, out, " done", "records"); got != published {
		t.Errorf("the tail's final progress line says records=%d, its summary %d events published", got, published)
	}

	repl := buildBinary(t, "../replicator")
	mirror := t.TempDir()
	if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", mirror).CombinedOutput(); err != nil {
		t.Fatalf("replicator run: %v\n%s", err, out)
	}
	cmd := exec.Command(repl, "verify", "--from", from, "--to", mirror, "-v")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("verify: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var metas, revisions, blobs int64
	summary := stdout.String()
	if _, err := fmt.Sscanf(summary[strings.Index(summary, ": equal: ")+len(": equal: "):], "%d metas, %d revisions, %d blobs compared", &metas, &revisions, &blobs); err != nil {
		t.Fatalf("verify summary: %v\n%s", err, summary)
	}
	if got := logged(t, stderr.String(), " done", "records"); got != metas+revisions+blobs || got != 6 {
		t.Errorf("verify's final progress line says records=%d, its summary %d metas, %d revisions, %d blobs\n%s", got, metas, revisions, blobs, stderr.String())
	}
	if got := logged(t, stderr.String(), " done", "bytes"); got <= 0 {
		t.Errorf("verify's final progress line says bytes=%d after reading 6 records", got)
	}
}

// TestSnapshotAnySource (issue 13, item 2): `writer snapshot` read only a
// Postgres deployment or an S3 store. It now publishes any source: an
// archive, or a disk deployment (here a mirror of blobs.acbak, whose
// 1 MiB blob goes through the object store), and what it publishes
// materializes into a tree equal to the archive.
func TestSnapshotAnySource(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	archive := testfixtures.Path(t, "blobs.acbak")
	mirror := filepath.Join(t.TempDir(), "mirror")
	if out, err := exec.Command(repl, "mirror", "--from", archive, "--to", mirror).CombinedOutput(); err != nil {
		t.Fatalf("mirror: %v\n%s", err, out)
	}
	for _, from := range []string{archive, mirror} {
		bus := testStream(t)
		code, out, errs := runWriter(t, "snapshot", "--from", from, "--nats", bus.URL())
		if code != exitOK || !strings.Contains(out, "missing") {
			t.Fatalf("snapshot --from %s: exit %d\n%s%s", from, code, out, errs)
		}
		again := filepath.Join(t.TempDir(), "again")
		if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--to", again).CombinedOutput(); err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
		if out, err := exec.Command(repl, "verify", "--from", archive, "--to", again).CombinedOutput(); err != nil || !strings.Contains(string(out), ": equal:") {
			t.Fatalf("what the snapshot of %s published does not verify: %v\n%s", from, err, out)
		}
	}
}
