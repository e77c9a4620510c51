package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/internal/testsupport/redistest"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink"
	redissink "github.com/specstar/replicator/sink/redis"
	"github.com/specstar/replicator/stream"
)

// TestArchiveRedisRoundTrip: an archive replayed onto the stream and
// materialized into a deployment with its metas in Redis and its
// revisions and blobs on disk, then exported back with writer export,
// holds the same metas, revisions and blobs; that deployment verifies
// against the archive (named in a YAML deployment file), and a disk
// mirror of the same stream verifies against it.
func TestArchiveRedisRoundTrip(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	for _, name := range []string{"small.acbak", "blobs.acbak"} {
		t.Run(name, func(t *testing.T) {
			archive := testfixtures.Path(t, name)
			bus, err := stream.Open(context.Background(), stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(bus.Close)
			if code, out, errs := runWriter(t, "replay", archive, "--nats", bus.URL()); code != exitOK {
				t.Fatalf("replay: %d\n%s%s", code, out, errs)
			}
			meta := redistest.SinkURL("prefix=" + url.QueryEscape(redistest.Prefix(t)+"{model}:"))
			root := "disk:" + filepath.Join(t.TempDir(), "deployment")
			run := func(args ...string) {
				t.Helper()
				args = append([]string{"run", "--nats", bus.URL(), "--until-drained", "--listen", ""}, args...)
				if out, err := exec.Command(repl, args...).CombinedOutput(); err != nil {
					t.Fatalf("replicator %q: %v\n%s", args, err, out)
				}
			}
			run("--meta", meta, "--resources", root, "--blobs", root)

			exported := filepath.Join(t.TempDir(), "export.acbak")
			if code, out, errs := runWriter(t, "export", "--from-meta", meta, "--from-resources", root, "--from-blobs", root, "--to", exported); code != exitOK {
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

			config := filepath.Join(t.TempDir(), "deploy.yaml")
			yaml := "deployments:\n  fast:\n    meta: " + meta + "\n    resources: " + root + "\n    blobs: " + root + "\n"
			if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			verify(t, "the Redis deployment against the archive", repl, "--config", config, "--from", archive, "--to", "fast")
			mirror := filepath.Join(t.TempDir(), "mirror")
			run("--to", mirror)
			verify(t, "the disk mirror against the Redis deployment", repl, "--config", config, "--from", "fast", "--to", mirror)
		})
	}
}

// verify runs replicator verify, which must exit 0 having compared at
// least one meta and revision.
func verify(t *testing.T, what, repl string, args ...string) {
	t.Helper()
	out, err := exec.Command(repl, append([]string{"verify"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("verify %s: %v\n%s", what, err, out)
	}
	if !regexp.MustCompile(`equal: [1-9][0-9]* metas, [1-9][0-9]* revisions`).Match(out) {
		t.Fatalf("verify %s compared nothing:\n%s", what, out)
	}
}

// TestRedisTail: writer tail of a deployment with its metas in Redis and
// its revisions and blobs on disk publishes its snapshot, then what is
// written to it while it runs (a second archive replicated into it), so
// that a disk mirror of its stream verifies equal to the deployment.
func TestRedisTail(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	newBus := func() *stream.Bus {
		bus, err := stream.Open(context.Background(), stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(bus.Close)
		return bus
	}
	in, out := newBus(), newBus() // what SpecStar writes; what the tail publishes
	meta := redistest.SinkURL("prefix=" + url.QueryEscape(redistest.Prefix(t)+"{model}:"))
	root := "disk:" + filepath.Join(t.TempDir(), "deployment")
	write := func(archive string) { // SpecStar writing the deployment
		t.Helper()
		if code, o, errs := runWriter(t, "replay", testfixtures.Path(t, archive), "--nats", in.URL()); code != exitOK {
			t.Fatalf("replay: %d\n%s%s", code, o, errs)
		}
		args := []string{"run", "--nats", in.URL(), "--until-drained", "--listen", "", "--meta", meta, "--resources", root, "--blobs", root}
		if o, err := exec.Command(repl, args...).CombinedOutput(); err != nil {
			t.Fatalf("replicator run: %v\n%s", err, o)
		}
	}
	write("small.acbak")

	ctx, cancel := context.WithCancel(context.Background())
	tailed := make(chan int, 1)
	var tailOut, tailErr string
	go func() {
		var o, e syncBuffer
		code := run(ctx, []string{"tail", "--from-meta", meta, "--from-resources", root, "--from-blobs", root,
			"--nats", out.URL(), "--listen", "", "--interval", "200ms"}, &o, &e)
		tailOut, tailErr = o.String(), e.String()
		tailed <- code
	}()
	defer func() {
		cancel()
		if code := <-tailed; code != exitOK {
			t.Errorf("writer tail: exit %d\n%s%s", code, tailOut, tailErr)
		}
	}()
	mirror := filepath.Join(t.TempDir(), "mirror")
	config := filepath.Join(t.TempDir(), "deploy.yaml")
	yaml := "deployments:\n  fast:\n    meta: " + meta + "\n    resources: " + root + "\n    blobs: " + root + "\n"
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	// mirrored drains the tail's stream into the mirror until it verifies
	// equal to the deployment with at least metas metas.
	mirrored := func(metas int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			args := []string{"run", "--nats", out.URL(), "--until-drained", "--listen", "", "--to", mirror}
			if o, err := exec.Command(repl, args...).CombinedOutput(); err != nil {
				t.Fatalf("replicator run: %v\n%s", err, o)
			}
			o, err := exec.Command(repl, "verify", "--config", config, "--from", "fast", "--to", mirror).CombinedOutput()
			if m := regexp.MustCompile(`equal: ([0-9]+) metas`).FindSubmatch(o); err == nil && m != nil && string(m[1]) == fmt.Sprint(metas) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the mirror of the tail's stream does not verify equal to the deployment (%d metas):\n%s", metas, o)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	mirrored(6)          // small.acbak: the snapshot
	write("blobs.acbak") // written while the tail runs
	mirrored(6 + 5)
}

// TestFastSlowRoundTrip: a deployment written with its metas in Redis
// whose metas SpecStar then moved, half of them, into its Postgres meta
// store (write slow, delete from Redis), exports back (the Redis URL's
// slow= naming the Postgres store) as the same records as the archive,
// and a disk mirror of the stream verifies equal to it.
func TestFastSlowRoundTrip(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	ctx := context.Background()
	archive := testfixtures.Path(t, "blobs.acbak")
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	if code, o, errs := runWriter(t, "replay", archive, "--nats", bus.URL()); code != exitOK {
		t.Fatalf("replay: %d\n%s%s", code, o, errs)
	}
	meta := redistest.SinkURL("prefix=" + url.QueryEscape(redistest.Prefix(t)+"{model}:"))
	root := "disk:" + filepath.Join(t.TempDir(), "deployment")
	mirror := filepath.Join(t.TempDir(), "mirror")
	for _, to := range [][]string{{"--meta", meta, "--resources", root, "--blobs", root}, {"--to", mirror}} {
		args := append([]string{"run", "--nats", bus.URL(), "--until-drained", "--listen", ""}, to...)
		if o, err := exec.Command(repl, args...).CombinedOutput(); err != nil {
			t.Fatalf("replicator run: %v\n%s", err, o)
		}
	}

	// SpecStar's mover: every other meta goes to the slow store.
	slowURL := pgTablesOnly(t, "fs") + "&revisions=false"
	spec, err := redissink.ParseSpec(meta)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := spec.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := sink.Open(ctx, slowURL)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	moved, i := 0, 0
	for key, err := range fast.Scan(ctx, fast.Options().Pattern("")) {
		if err != nil {
			t.Fatal(err)
		}
		if i++; i%2 == 0 {
			continue
		}
		model, rid, _ := fast.ParseKey(key)
		m, err := fast.Meta(ctx, model, rid)
		if err == nil {
			_, err = slow.ApplyMeta(ctx, model, m)
		}
		if err == nil {
			err = slow.Flush(ctx)
		}
		if err == nil {
			err = fast.Client().Del(ctx, key).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
		moved++
	}
	if moved == 0 || moved == i {
		t.Fatalf("moved %d of %d metas; want some in each store", moved, i)
	}

	fastslow := meta + "&slow=" + url.QueryEscape(slowURL)
	exported := filepath.Join(t.TempDir(), "export.acbak")
	if code, o, errs := runWriter(t, "export", "--from-meta", fastslow, "--from-resources", root, "--from-blobs", root, "--to", exported); code != exitOK {
		t.Fatalf("export: %d\n%s%s", code, o, errs)
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
	config := filepath.Join(t.TempDir(), "deploy.yaml")
	yaml := "deployments:\n  fastslow:\n    meta: '" + fastslow + "'\n    resources: " + root + "\n    blobs: " + root + "\n"
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	verify(t, "the disk mirror against the fast/slow deployment", repl, "--config", config, "--from", "fastslow", "--to", mirror)
}

// pgTablesOnly is a Postgres URL with a fresh table prefix whose tables
// are dropped when the test ends.
func pgTablesOnly(t *testing.T, stem string) string {
	t.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("%s_%d_", stem, time.Now().UnixNano()%1_000_000_000)
	conn, err := pgx.Connect(ctx, pgDSN())
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgDSN(), err)
	}
	t.Cleanup(func() {
		rows, _ := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE starts_with(tablename, $1)", prefix)
		names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, n := range names {
			conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE")
		}
		conn.Close(ctx)
	})
	sep := "?"
	if strings.Contains(pgDSN(), "?") {
		sep = "&"
	}
	return pgDSN() + sep + "table_prefix=" + prefix
}
