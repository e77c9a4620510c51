package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/gobuild"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/stream"
)

func pgDSN() string { return pgtest.SharedDSN() }

func payload(title string, n int) events.Value {
	return events.Struct{Declared: 2, Fields: []events.StructField{{Name: "title", Value: title}, {Name: "n", Value: int64(n)}}}
}

// TestPostgresSnapshotAndTail: a Go writer writes a SpecStar Postgres
// deployment on the shared server (wal_level=replica); `writer snapshot`
// and then `writer tail` (which must fall back to polling, stopped and
// restarted once) publish it, `replicator run` mirrors it to disk, and
// `replicator verify --source postgres://` reports equal each time.
func TestPostgresSnapshotAndTail(t *testing.T) {
	tailScenario(t, pgDSN(), "poll")
}

// TestPostgresLogicalTail: the same on a wal_level=logical cluster, where
// `writer tail` creates a slot, publishes the snapshot the slot exported
// and streams changes, confirming them to Postgres as they are acked.
func TestPostgresLogicalTail(t *testing.T) {
	t.Parallel()
	dsn := pgtest.LogicalCluster(t)
	tailScenario(t, dsn, "logical")
	var slots int
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var confirmed *string
	if err := conn.QueryRow(context.Background(), "SELECT count(*), max(confirmed_flush_lsn::text) FROM pg_replication_slots").Scan(&slots, &confirmed); err != nil {
		t.Fatal(err)
	}
	if slots != 1 || confirmed == nil {
		t.Fatalf("want one slot with a confirmed position, got %d (%v)", slots, confirmed)
	}
}

func tailScenario(t *testing.T, dsn, wantMode string) {
	ctx := context.Background()
	prefix := fmt.Sprintf("wt_%d_", time.Now().UnixNano()%1_000_000_000)
	w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", dsn, err)
	}
	t.Cleanup(func() { w.DropAll(context.Background()); w.Close() })
	for _, m := range []string{"issue", "user"} {
		if err := w.CreateModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		model := []string{"issue", "user"}[i%2]
		rid := fmt.Sprintf("%s:%03d", model, i)
		if _, err := w.Create(ctx, model, rid, payload(rid, 0), specstarpg.Write{}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := w.Update(ctx, model, rid, payload(rid, 1), specstarpg.Write{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The stream, served from this test; the replicator is a real process.
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	repl := buildBinary(t, "../replicator")
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	from := dsn + sep + "table_prefix=" + prefix
	dir := t.TempDir()
	// mirrorAndVerify drains the stream into the mirror and compares it
	// with Postgres, again and again while a tail may still be publishing,
	// until they are equal (or a minute has passed).
	mirrorAndVerify := func(step string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", dir).CombinedOutput(); err != nil {
				t.Fatalf("%s: replicator run: %v\n%s", step, err, out)
			}
			out, err := exec.Command(repl, "verify", "--source", from, "--sink", dir).CombinedOutput()
			if err == nil && bytes.Contains(out, []byte(": equal:")) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: verify: %v\n%s", step, err, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	if wantMode == "poll" {
		if code, out, errs := runWriter(t, "snapshot", "--from", from, "--nats", bus.URL()); code != exitOK || !strings.Contains(out, "20 metas, 27 revisions") {
			t.Fatalf("snapshot: exit %d\n%s%s", code, out, errs)
		}
		mirrorAndVerify("after the snapshot")
		// A second snapshot is refused as done; nothing new is published.
		if code, out, _ := runWriter(t, "snapshot", "--from", from, "--nats", bus.URL()); code != exitOK || !strings.Contains(out, "was completed") {
			t.Fatalf("second snapshot: exit %d %s", code, out)
		}
	}

	// tail runs `writer tail`, makes the changes, waits until the mirror
	// has them, and stops the tail.
	tail := func(step string, changes func()) string {
		t.Helper()
		tctx, cancel := context.WithCancel(ctx)
		done := make(chan string, 1)
		go func() {
			var out, errb bytes.Buffer
			run(tctx, []string{"tail", "--from", from, "--nats", bus.URL(), "--interval", "100ms", "--listen", ""}, &out, &errb)
			done <- out.String() + errb.String()
		}()
		changes()
		mirrorAndVerify(step)
		cancel()
		return <-done
	}
	out := tail("after the first tail", func() {
		if _, err := w.Update(ctx, "issue", "issue:000", payload("tailed", 2), specstarpg.Write{}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Create(ctx, "user", "user:new", payload("new", 0), specstarpg.Write{}); err != nil {
			t.Fatal(err)
		}
	})
	if !strings.Contains(out, "("+wantMode+") stopped") {
		t.Fatalf("tail: want mode %s: %s", wantMode, out)
	}

	// Changes made while no tail runs are picked up by the next one, from
	// the stored cursor.
	if _, err := w.Update(ctx, "user", "user:001", payload("while stopped", 3), specstarpg.Write{}); err != nil {
		t.Fatal(err)
	}
	tail("after the restarted tail", func() {
		if _, err := w.Update(ctx, "issue", "issue:002", payload("second tail", 4), specstarpg.Write{}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLogicalTailUnderLoad: while a Go writer keeps writing a SpecStar
// deployment, `writer tail` and `replicator run --sink DIR` (real
// processes) stream it by logical replication into a disk mirror, which
// converges and verifies equal once the writer stops. Variants: undisturbed, Postgres restarted in the middle,
// and the tail process killed (SIGKILL) in the middle and started again.
func TestLogicalTailUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a throwaway cluster and two binaries per variant")
	}
	t.Parallel()
	writerBin, replBin := buildBinary(t, "."), buildBinary(t, "../replicator")
	for _, variant := range []string{"steady", "postgres-restart", "tail-killed"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cluster := pgtest.StartLogical(t)
			prefix := "load_"
			w, err := specstarpg.Open(ctx, cluster.DSN, specstarpg.Options{TablePrefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.CreateModel(ctx, "issue"); err != nil {
				t.Fatal(err)
			}
			bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer bus.Close()
			from := cluster.DSN + "&table_prefix=" + prefix
			var tailLog syncBuffer
			startTail := func() *exec.Cmd {
				cmd := exec.Command(writerBin, "tail", "--from", from, "--nats", bus.URL(), "--listen", "")
				cmd.Stdout, cmd.Stderr = &tailLog, &tailLog
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return cmd
			}
			tail := startTail()
			defer func() { tail.Process.Kill(); tail.Wait() }()
			mirror := t.TempDir()
			replicator := exec.Command(replBin, "run", "--nats", bus.URL(), "--listen", "", "--sink", mirror)
			if err := replicator.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { replicator.Process.Signal(syscall.SIGTERM); replicator.Wait() }()

			// The writer: creates and updates until told to stop; writes
			// that fail while Postgres restarts simply did not happen.
			stop, done := make(chan struct{}), make(chan int)
			var progress atomic.Int64 // writes so far, for the waits below
			go func() {
				written := 0
				for i := 0; ; i++ {
					select {
					case <-stop:
						done <- written
						return
					default:
					}
					rid := fmt.Sprintf("issue:%03d", i%40)
					var err error
					if i < 40 {
						_, err = w.Create(ctx, "issue", rid, payload(rid, i), specstarpg.Write{})
					} else {
						_, err = w.Update(ctx, "issue", rid, payload(rid, i), specstarpg.Write{})
					}
					if err == nil {
						written++
						progress.Add(1)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
			// Some writes before the fault and enough after it, counted, not
			// timed: a loaded machine writes fewer in a fixed window.
			waitfor.Until(t, "25 writes before the fault", waitfor.Options{Progress: func() any { return progress.Load() }},
				func() bool { return progress.Load() >= 25 })
			switch variant {
			case "postgres-restart":
				cluster.Restart(t)
			case "tail-killed":
				tail.Process.Signal(syscall.SIGKILL)
				tail.Wait()
				tail = startTail()
			}
			after := progress.Load()
			waitfor.Until(t, "25 writes after the fault", waitfor.Options{Progress: func() any { return progress.Load() }},
				func() bool { return progress.Load() >= after+25 })
			close(stop)
			written := <-done
			if written < 50 {
				t.Fatalf("the writer managed only %d writes", written)
			}

			// Converge: the replicator (running as a service since the
			// start) applies what the tail published; compare with Postgres
			// until equal (the tail may still be catching up).
			deadline := time.Now().Add(60 * time.Second)
			for {
				out, err := exec.Command(replBin, "verify", "--source", from, "--sink", mirror).CombinedOutput()
				if err == nil && bytes.Contains(out, []byte(": equal:")) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the mirror did not converge after %d writes:\n%s\ntail log:\n%s", written, out, tailLog.String())
				}
				time.Sleep(500 * time.Millisecond)
			}
			if variant == "postgres-restart" && !strings.Contains(tailLog.String(), "starting again") {
				t.Errorf("the tail never noticed the restart:\n%s", tailLog.String())
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe to read while a child process writes
// to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSnapshotPublishesReferencedBlobs: with blobs= naming the
// deployment's DiskBlobStore, the blobs a payload references travel with
// it: a small one inline, one larger than a message through the object
// store; the mirror's blob files equal the deployment's byte for byte.
func TestSnapshotPublishesReferencedBlobs(t *testing.T) {
	ctx := context.Background()
	store := t.TempDir()
	d, err := disk.Open(ctx, store, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	small := []byte("hello")
	large := bytes.Repeat([]byte("0123456789abcdef"), 2<<20/16) // 2 MiB: more than one message
	var refs []events.Value
	for _, b := range [][]byte{small, large} {
		id := dedup.FileID(b)
		if _, err := d.ApplyBlob(ctx, id, int64(len(b)), "application/octet-stream", bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, events.Map{{Key: "file_id", Value: id}, {Key: "size", Value: int64(len(b))}, {Key: "content_type", Value: "application/octet-stream"}})
	}
	d.Close()

	prefix := fmt.Sprintf("wb_%d_", time.Now().UnixNano()%1_000_000_000)
	w, err := specstarpg.Open(ctx, pgDSN(), specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgDSN(), err)
	}
	t.Cleanup(func() { w.DropAll(context.Background()); w.Close() })
	if err := w.CreateModel(ctx, "doc"); err != nil {
		t.Fatal(err)
	}
	doc := events.Struct{Declared: 3, Fields: []events.StructField{{Name: "title", Value: "with files"}, {Name: "file", Value: refs[0]}, {Name: "thumbs", Value: []any{refs[1]}}}}
	if _, err := w.Create(ctx, "doc", "doc:1", doc, specstarpg.Write{}); err != nil {
		t.Fatal(err)
	}

	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	sep := "?"
	if strings.Contains(pgDSN(), "?") {
		sep = "&"
	}
	from := pgDSN() + sep + "table_prefix=" + prefix + "&blobs=" + filepath.Join(store, "_blobs")
	if code, out, errs := runWriter(t, "snapshot", "--from", from, "--nats", bus.URL()); code != exitOK {
		t.Fatalf("snapshot: exit %d\n%s%s", code, out, errs)
	}
	repl := buildBinary(t, "../replicator")
	mirror := t.TempDir()
	if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", mirror).CombinedOutput(); err != nil {
		t.Fatalf("replicator run: %v\n%s", err, out)
	}
	for _, b := range [][]byte{small, large} {
		id := dedup.FileID(b)
		want, _ := os.ReadFile(filepath.Join(store, "_blobs", id))
		got, err := os.ReadFile(filepath.Join(mirror, "_blobs", id))
		if err != nil || !bytes.Equal(got, want) || len(want) < len(b) {
			t.Fatalf("blob %s (%d bytes) not mirrored byte for byte: %v", id, len(b), err)
		}
	}
	info, err := bus.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if objs, err := bus.Blobs(ctx); err != nil {
		t.Fatal(err)
	} else if _, err := objs.GetInfo(ctx, dedup.FileID(large)); err != nil {
		t.Fatalf("the 2 MiB blob should have gone through the object store: %v (stream holds %d messages)", err, info.State.Msgs)
	}
}

// TestLogicalTailPropagatesDeletes: a resource permanently deleted in
// Postgres (its meta, index and data rows) disappears from the mirror.
func TestLogicalTailPropagatesDeletes(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.LogicalCluster(t)
	prefix := "del_"
	w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.CreateModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		rid := fmt.Sprintf("issue:%d", i)
		if _, err := w.Create(ctx, "issue", rid, payload(rid, i), specstarpg.Write{}); err != nil {
			t.Fatal(err)
		}
	}
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	from := dsn + "&table_prefix=" + prefix
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan string, 1)
	go func() {
		var out, errb bytes.Buffer
		run(tctx, []string{"tail", "--from", from, "--nats", bus.URL(), "--listen", ""}, &out, &errb)
		done <- out.String() + errb.String()
	}()
	// Wait until the tail has published its snapshot (the slot exists).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if info, err := bus.Stream.Info(ctx); err == nil && info.State.Msgs >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tail never published its snapshot")
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// SpecStar's permanent delete: the meta row and the resource's rows.
	for _, q := range []string{
		`DELETE FROM "` + prefix + `issue_meta" WHERE resource_id = 'issue:2'`,
		`DELETE FROM "` + prefix + `resource_index" WHERE resource_id = 'issue:2'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the tail has published the delete.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := bus.Stream.GetLastMsgForSubject(ctx, "specstar.issue.purge"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delete was never published")
		}
	}
	cancel()
	if out := <-done; !strings.Contains(out, "(logical) stopped") {
		t.Fatalf("tail: %s", out)
	}
	repl := buildBinary(t, "../replicator")
	mirror := t.TempDir()
	if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", mirror).CombinedOutput(); err != nil {
		t.Fatalf("replicator run: %v\n%s", err, out)
	}
	for i, want := range []bool{true, false, true} {
		_, err := os.Stat(filepath.Join(mirror, "issue", "meta", fmt.Sprintf("issue:%d.data", i+1)))
		if (err == nil) != want {
			t.Errorf("issue:%d in the mirror: %v, want present=%v", i+1, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(mirror, "issue", "data", "resource", "issue:2")); err == nil {
		t.Error("the deleted resource's revisions are still in the mirror")
	}
	if out, err := exec.Command(repl, "verify", "--source", from, "--sink", mirror).CombinedOutput(); err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
}

// TestArchivePostgresRoundTrip: an archive replayed into the Postgres sink
// (blobs into a disk sink beside it), then exported back with writer
// export, holds the same metas, revisions and blobs, and verifies.
func TestArchivePostgresRoundTrip(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	for _, name := range []string{"small.acbak", "blobs.acbak"} {
		t.Run(name, func(t *testing.T) {
			archive := testfixtures.Path(t, name)
			_, bus, pg, _ := replayWithTables(t, archive, "rt")
			pg += "&revisions=true"
			blobDir := t.TempDir()
			if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", pg, "--sink", blobDir).CombinedOutput(); err != nil {
				t.Fatalf("replicator run: %v\n%s", err, out)
			}
			exported := filepath.Join(t.TempDir(), "export.acbak")
			if code, out, errs := runWriter(t, "export", exported, "--from", pg+"&blobs="+filepath.Join(blobDir, "_blobs")); code != exitOK {
				t.Fatalf("export: %d\n%s%s", code, out, errs)
			}
			if code, out, _ := runWriter(t, "verify", exported); code != exitOK {
				t.Fatalf("the exported archive does not verify:\n%s", out)
			}
			want, got := recordSet(t, archive), recordSet(t, exported)
			if len(want) == 0 || len(got) != len(want) {
				t.Fatalf("exported %d distinct records, the archive holds %d", len(got), len(want))
			}
			for k := range want {
				if !got[k] {
					t.Errorf("a record of the archive is missing from the export (%.60q)", k)
				}
			}
		})
	}
}

// recordSet is the set of an archive's Meta, Revision and Blob records,
// each by its exact bytes (model included).
func recordSet(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	set := map[string]bool{}
	model := ""
	for fr, err := range acbak.NewReader(f, acbak.Options{}).All() {
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch r := fr.Record.(type) {
		case *events.ModelStartRecord:
			model = r.ModelName
		case *events.MetaRecord, *events.RevisionRecord, *events.BlobRecord:
			set[model+"\x00"+string(fr.Payload)] = true
		}
	}
	return set
}

// buildBinary builds the command in pkg (relative to this package) once
// per test run, so tests can run it as a real process.
func buildBinary(tb testing.TB, pkg string) string {
	tb.Helper()
	name := filepath.Base(pkg)
	if pkg == "." {
		name = "writer" // this package
	}
	return binaries.Binary(tb, pkg, name)
}

// binaries holds one build of each command per test run.
var binaries gobuild.Cache

// replayWithTables prepares a round trip through Postgres tables: a fresh
// table prefix (its tables dropped at cleanup) and archive replayed onto a
// fresh embedded stream. It returns the connection, the stream, the
// Postgres URL with table_prefix set, and the prefix.
func replayWithTables(t *testing.T, archive, stem string) (conn *pgx.Conn, bus *stream.Bus, pg, prefix string) {
	t.Helper()
	ctx := context.Background()
	prefix = fmt.Sprintf("%s_%d_", stem, time.Now().UnixNano()%1_000_000_000)
	conn, err := pgx.Connect(ctx, pgDSN())
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgDSN(), err)
	}
	t.Cleanup(func() {
		rows, _ := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE tablename LIKE $1", prefix+"%")
		names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, n := range names {
			conn.Exec(ctx, `DROP TABLE IF EXISTS "`+n+`" CASCADE`)
		}
		conn.Close(ctx)
	})
	bus, err = stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	if code, out, errs := runWriter(t, "replay", archive, "--nats", bus.URL()); code != exitOK {
		t.Fatalf("replay: %d\n%s%s", code, out, errs)
	}
	sep := "?"
	if strings.Contains(pgDSN(), "?") {
		sep = "&"
	}
	return conn, bus, pgDSN() + sep + "table_prefix=" + prefix, prefix
}
