package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/internal/testsupport/testsize"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/source"
	srcarchive "github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// testBus starts an embedded JetStream server in a temporary directory
// and returns a connection to it; its URL serves other processes too.
func testBus(t *testing.T) *stream.Bus {
	t.Helper()
	return testBusAt(t, t.TempDir())
}

// testBusAt is testBus on the embedded server of dataDir.
func testBusAt(t *testing.T, dataDir string) *stream.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := stream.Open(ctx, stream.Config{DataDir: dataDir}, quietLog())
	if err != nil {
		t.Fatalf("embedded JetStream: %v", err)
	}
	t.Cleanup(bus.Close)
	return bus
}

func replay(t *testing.T, bus *stream.Bus, archive string) *stream.PublishStats {
	t.Helper()
	ctx := context.Background()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pub := bus.NewPublisher(64)
	if _, err := srcarchive.Replay(ctx, f, acbak.Options{}, bus.Prefix(), bus.BlobBucket(), pub, nil); err != nil {
		t.Fatalf("replay %s: %v", archive, err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return &pub.Stats
}

// drain runs the replicator against bus until it has applied everything.
func drain(t *testing.T, bus *stream.Bus, sinks ...string) string {
	t.Helper()
	args := []string{"run", "--nats", bus.URL(), "--until-drained", "--listen", ""}
	for _, s := range sinks {
		args = append(args, "--sink", s)
	}
	code, out, errs := runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("replicator run: exit %d\n%s%s", code, out, errs)
	}
	return out
}

// snapshot maps every file and link under root to its content (or link
// target) and modification time, to tell whether anything changed.
type entry struct {
	sum   string
	mtime time.Time
}

func snapshot(t *testing.T, root string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == disk.MarkDir && d.IsDir() {
			return filepath.SkipDir // the replicator's marks, not SpecStar's tree
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = entry{sum: "-> " + target, mtime: info.ModTime()}
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			out[rel] = entry{sum: hex.EncodeToString(s[:]), mtime: info.ModTime()}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMirrorMatchesReference mirrors each disk-layout archive with the one
// command and checks that every store file, meta file, SQLite database
// row set and blob file equals what SpecStar itself wrote for the same
// data, and that `replicator verify` reports equal.
func TestMirrorMatchesReference(t *testing.T) {
	variants := []struct {
		name, query string
	}{
		{"factory-json", ""},
		{"factory-msgpack", ""},
		{"sqlite-msgpack", "?encoding=msgpack&meta=sqlite"},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			archive := testfixtures.Path(t, "disk-layout", v.name+".acbak")
			dir := t.TempDir()
			code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", "disk:"+dir+v.query)
			if code != exitOK {
				t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
			}
			code, out, _ = runCmd(t, "verify", "--archive", archive, "--sink", "disk:"+dir+v.query)
			if code != exitOK || !strings.Contains(out, ": equal:") {
				t.Fatalf("verify: exit %d\n%s", code, out)
			}
			ref := testfixtures.Path(t, "disk-layout", v.name)
			ours, theirs := snapshot(t, dir), snapshot(t, ref)
			compared := 0
			for rel, e := range ours {
				want, ok := theirs[rel]
				if strings.HasSuffix(rel, "meta.db") || strings.Contains(rel, "/resource/") {
					continue // SQLite files and index entries differ in form; checked by the sink's tests
				}
				if !ok {
					t.Errorf("%s: written by us, absent from the reference tree", rel)
					continue
				}
				if e.sum != want.sum {
					t.Errorf("%s: content differs from the reference", rel)
				}
				compared++
			}
			if compared == 0 {
				t.Fatal("no files compared")
			}
			t.Logf("%d files byte-identical to the reference", compared)
		})
	}
}

// TestMirrorGoldenArchives: every reference archive mirrors and verifies,
// including blobs.acbak, whose 1 MiB blob exceeds the server's max payload
// and so travels through the object store.
func TestMirrorGoldenArchives(t *testing.T) {
	for _, name := range []string{"small.acbak", "medium.acbak", "blobs.acbak", "msgpack.acbak"} {
		t.Run(name, func(t *testing.T) {
			archive := testfixtures.Path(t, name)
			dir := t.TempDir()
			code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", dir)
			if code != exitOK {
				t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
			}
			if name == "blobs.acbak" && !strings.Contains(out, "(1 through the object store)") {
				t.Errorf("expected the 1 MiB blob to go through the object store: %s", out)
			}
			code, out, _ = runCmd(t, "verify", "--archive", archive, "--sink", dir)
			if code != exitOK {
				t.Fatalf("verify: exit %d\n%s", code, out)
			}
		})
	}
}

// TestReplayTwiceChangesNothing: the second replay of an archive stores no
// new event, and draining again rewrites no file.
func TestReplayTwiceChangesNothing(t *testing.T) {
	bus := testBus(t)
	archive := testfixtures.Path(t, "blobs.acbak")
	first := replay(t, bus, archive)
	dir := t.TempDir()
	drain(t, bus, dir)
	before := snapshot(t, dir)
	second := replay(t, bus, archive)
	if second.Duplicates != second.Published || first.Duplicates != 0 {
		t.Fatalf("first replay %+v, second %+v: the second must be all duplicates", first, second)
	}
	drain(t, bus, dir)
	after := snapshot(t, dir)
	if len(before) != len(after) {
		t.Fatalf("%d entries before, %d after", len(before), len(after))
	}
	for rel, e := range before {
		if after[rel] != e {
			t.Errorf("%s changed", rel)
		}
	}
}

// TestOldArchiveAfterNewer: replaying an older archive after a newer one
// leaves the newer metas in place.
func TestOldArchiveAfterNewer(t *testing.T) {
	data := testfixtures.Read(t, "small.acbak")
	// The "old" archive: each meta rolled back one hour and one revision.
	old := rewriteMetas(t, data, func(m *events.ResourceMeta) {
		m.UpdatedTime.Time = m.UpdatedTime.Add(-time.Hour)
		m.TotalRevisionCount--
	})
	oldPath := filepath.Join(t.TempDir(), "old.acbak")
	if err := os.WriteFile(oldPath, old, 0o644); err != nil {
		t.Fatal(err)
	}
	bus := testBus(t)
	dir := t.TempDir()
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	drain(t, bus, dir)
	replay(t, bus, oldPath)
	drain(t, bus, dir)
	code, out, _ := runCmd(t, "verify", "--archive", testfixtures.Path(t, "small.acbak"), "--sink", dir)
	if code != exitOK {
		t.Fatalf("after the old archive, the sink no longer equals the newer one:\n%s", out)
	}
	code, out, _ = runCmd(t, "verify", "--archive", oldPath, "--sink", dir)
	if code != exitDiffer || !strings.Contains(out, "differs") {
		t.Fatalf("the old metas must not have been applied: exit %d\n%s", code, out)
	}
}

func rewriteMetas(t *testing.T, data []byte, edit func(*events.ResourceMeta)) []byte {
	t.Helper()
	var out bytes.Buffer
	w := acbak.NewWriter(&out)
	for f, err := range acbak.NewReader(bytes.NewReader(data), acbak.Options{}).All() {
		if err != nil {
			t.Fatal(err)
		}
		rec := f.Record
		if mr, ok := rec.(*events.MetaRecord); ok {
			m, err := mr.Meta()
			if err != nil {
				t.Fatal(err)
			}
			edit(m)
			b, err := m.Encode(events.Msgpack)
			if err != nil {
				t.Fatal(err)
			}
			rec = &events.MetaRecord{Data: b}
		}
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// publishRaw puts one event on the stream as a (possibly hostile)
// publisher would.
func publishRaw(t *testing.T, bus *stream.Bus, model string, rec events.Record, payload []byte) {
	t.Helper()
	env, err := events.EnvelopeFor(bus.Prefix(), model, rec, payload)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(env.Subject)
	for k, v := range env.Headers {
		msg.Header.Set(k, v)
	}
	msg.Data = env.Payload
	if _, err := bus.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// TestBadInputIsDeadLettered: each bad event lands in the dead-letter
// stream with its reason, the replicator moves on, and nothing outside the
// sink's root is touched.
func TestBadInputIsDeadLettered(t *testing.T) {
	small := testfixtures.Read(t, "small.acbak")
	var meta *events.ResourceMeta
	var res *events.RawResource
	for f, err := range acbak.NewReader(bytes.NewReader(small), acbak.Options{}).All() {
		if err != nil {
			t.Fatal(err)
		}
		switch r := f.Record.(type) {
		case *events.MetaRecord:
			if meta == nil {
				meta, _ = r.Meta()
			}
		case *events.RevisionRecord:
			if res == nil {
				res, _ = r.Resource()
			}
		}
	}
	metaWithID := func(id string) events.Record {
		m := *meta
		m.ResourceID = id
		b, err := m.Encode(events.Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		return &events.MetaRecord{Data: b}
	}
	revWith := func(edit func(*events.RawResource)) events.Record {
		r := *res
		edit(&r)
		b, err := r.Encode(events.Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		return &events.RevisionRecord{Data: b}
	}
	cases := []struct {
		name   string
		model  string
		rec    events.Record
		reason string
	}{
		{"meta data not msgpack", "issue", &events.MetaRecord{Data: []byte{0xc1}}, "not a valid ResourceMeta"},
		{"revision data truncated", "issue", &events.RevisionRecord{Data: []byte{0x82, 0xa4}}, "not a valid RawResource"},
		{"blob bytes do not match file_id", "issue", &events.BlobRecord{FileID: "99aa06d3014798d86001c324468d497f", BlobData: []byte("x"), Size: 1}, "bytes hash to"},
		{"resource_id escapes the root", "issue", metaWithID("../../escape"), "resource_id"},
		{"resource_id with a slash", "issue", metaWithID("a/b"), "resource_id"},
		{"empty resource_id", "issue", metaWithID(""), "resource_id"},
		{"resource_id with NUL", "issue", metaWithID("a\x00b"), "resource_id"},
		{"absolute resource_id", "issue", metaWithID("/etc/passwd"), "resource_id"},
		{"model escapes the root", "..", metaWithID("fine"), "model"},
		{"revision_id escapes", "issue", revWith(func(r *events.RawResource) { r.Info.RevisionID = "../../x" }), "revision_id"},
		{"schema_version escapes", "issue", revWith(func(r *events.RawResource) { r.Info.SchemaVersion = events.Some("../../x") }), "schema_version"},
	}
	bus := testBus(t)
	parent := t.TempDir()
	root := filepath.Join(parent, "sink")
	for _, tc := range cases {
		publishRaw(t, bus, tc.model, tc.rec, nil)
	}
	// A good record after the bad ones still gets applied.
	publishRaw(t, bus, "issue", metaWithID("issue:good"), nil)
	before := snapshot(t, parent)
	out := drain(t, bus, root+"?name=badsink")
	if !strings.Contains(out, fmt.Sprintf("%d dead-lettered", len(cases))) {
		t.Fatalf("want %d dead letters: %s", len(cases), out)
	}
	if _, err := os.Stat(filepath.Join(root, "issue", "meta", "issue:good.data")); err != nil {
		t.Fatalf("the good record after the bad ones was not applied: %v", err)
	}
	// Nothing outside the root.
	for rel := range snapshot(t, parent) {
		if _, ok := before[rel]; !ok && !strings.HasPrefix(rel, "sink") {
			t.Errorf("%s was written outside the sink root", rel)
		}
	}
	// Each reason is in the dead-letter stream.
	code, list, _ := runCmd(t, "dlq", "list", "--nats", bus.URL(), "--sink", "badsink")
	if code != exitOK {
		t.Fatalf("dlq list: exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != len(cases)+1 {
		t.Fatalf("dlq list shows %d lines:\n%s", len(lines), list)
	}
	for i, tc := range cases {
		if !strings.Contains(lines[i], "reason=") || !strings.Contains(lines[i], tc.reason) {
			t.Errorf("%s: dead letter %q lacks reason %q", tc.name, lines[i], tc.reason)
		}
	}
	// dlq replay re-publishes them (and they are dead-lettered again,
	// since they are still bad): the list is then as long as before.
	code, out, _ = runCmd(t, "dlq", "replay", "--nats", bus.URL(), "--sink", "badsink")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("%d dead letters re-published", len(cases))) {
		t.Fatalf("dlq replay: exit %d %s", code, out)
	}
	drain(t, bus, root+"?name=badsink")
	_, list2, _ := runCmd(t, "dlq", "list", "--nats", bus.URL(), "--sink", "badsink")
	if n := len(strings.Split(strings.TrimSpace(list2), "\n")); n != len(cases)+1 {
		t.Fatalf("after replay the dead letters should be back once each; got %d lines:\n%s", n, list2)
	}
}

// TestSeparateCommandsShareTheEmbeddedServer: `writer replay` and
// `replicator run` started one after the other on the default embedded
// server (same data directory) see the same stream.
func TestSeparateCommandsShareTheEmbeddedServer(t *testing.T) {
	dataDir := t.TempDir()
	ctx := context.Background()
	bus, err := stream.Open(ctx, stream.Config{DataDir: dataDir}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	bus.Close() // the server stops with its process; the stream stays on disk
	dir := t.TempDir()
	code, out, errs := runCmd(t, "run", "--data-dir", dataDir, "--nats", "", "--until-drained", "--listen", "", "--sink", dir)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := runCmd(t, "verify", "--archive", testfixtures.Path(t, "small.acbak"), "--sink", dir); code != exitOK {
		t.Fatalf("verify: %s", out)
	}
}

// killPartway waits, while cmd (a started `replicator run` on bus)
// drains, until the stream's consumer has acknowledged a random share of
// what was left when it started (a tenth to nine tenths of it), then
// kills it with SIGKILL, so the kill lands mid-drain however fast the
// machine is; it reports false if the process finished first, and fails
// the test if it exited with an error.
func killPartway(t *testing.T, bus *stream.Bus, cmd *exec.Cmd, rng *rand.Rand) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ctx := t.Context()
	acked := func() uint64 {
		var floor uint64
		for ci := range bus.Stream.ListConsumers(ctx).Info() {
			floor = max(floor, ci.AckFloor.Stream)
		}
		return floor
	}
	info, err := bus.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	floor, last := acked(), info.State.LastSeq
	left := int(last - min(floor, last))
	target := floor + uint64(max(1, left/10+rng.IntN(max(1, left*8/10))))
	deadline := time.After(time.Minute)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run exited: %v", err)
			}
			return false // finished before the kill
		case <-deadline:
		case <-time.After(2 * time.Millisecond):
			if acked() < target {
				continue
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return true
	}
}

// TestCrashAndResume kills the replicator process (SIGKILL) at random
// points of a drain (15,000 revisions and four kills in the long suite,
// 3,000 and two by default), restarts it each time, and checks that the
// final tree equals a clean run's, file for file.
func TestCrashAndResume(t *testing.T) {
	t.Parallel() // seconds of waiting on processes: overlaps the package's other slow tests
	if testing.Short() {
		t.Skip("builds the binary and drains an archive several times")
	}
	// sync=file makes each file durable before the next step; sync=batch
	// writes a new revision's files in place and syncs once per batch, and
	// relies on redelivery to repair what a kill cut short.
	bin := buildReplicator(t)
	for _, mode := range []string{"sync=file", "sync=batch"} {
		t.Run(mode, func(t *testing.T) { crashAndResume(t, bin, mode) })
	}
}

func crashAndResume(t *testing.T, bin, mode string) {
	// sync=file is about three times slower: a smaller archive still lasts
	// past the kills.
	resources, wantKills := testsize.Of(300, 1500), testsize.Of(2, 4)
	if mode == "sync=file" {
		resources = testsize.Of(150, 1500)
	}
	archive := filepath.Join(t.TempDir(), "crash.acbak")
	if err := writeArchive(archive, resources); err != nil {
		t.Fatal(err)
	}
	bus := testBus(t)
	replay(t, bus, archive)

	crashed := filepath.Join(t.TempDir(), "crashed")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills := 0
	for i := 0; i < wantKills+2 && kills < wantKills; i++ {
		cmd := exec.Command(bin, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--batch", "64", "--ack-wait", "3s", "--sink", crashed+"?"+mode+"&name=crashy")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if killPartway(t, bus, cmd, rng) {
			kills++
		}
	}
	if kills == 0 {
		t.Fatal("the replicator always finished before it could be killed; enlarge the archive")
	}
	// Resume to completion.
	if code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--ack-wait", "3s", "--sink", crashed+"?"+mode+"&name=crashy"); code != exitOK {
		t.Fatalf("final run: %d\n%s%s", code, out, errs)
	}
	clean := filepath.Join(t.TempDir(), "clean")
	drain(t, bus, clean+"?sync=batch&name=clean") // the tree does not depend on the sync mode

	a, b := snapshot(t, crashed), snapshot(t, clean)
	leftovers := 0
	for rel := range a {
		if strings.HasPrefix(rel, ".specstar-tmp") {
			leftovers++
			delete(a, rel)
		}
	}
	if len(a) != len(b) {
		t.Errorf("crashed tree has %d files, clean tree %d", len(a), len(b))
	}
	for rel, e := range b {
		if a[rel].sum != e.sum {
			t.Errorf("%s differs after %d kills", rel, kills)
		}
	}
	if leftovers != 0 {
		t.Errorf("%d temporary files left behind by the kills", leftovers)
	}
	t.Logf("killed %d times; %d files equal", kills, len(b))
}

// TestUnknownTagsTravelUnchanged: a record with a tag from a newer
// SpecStar is on the stream with its exact bytes, and sinks skip it.
func TestUnknownTagsTravelUnchanged(t *testing.T) {
	archive := testfixtures.Path(t, "bad", "unknown_tag.acbak")
	var want []byte
	for f, err := range acbak.NewReader(bytes.NewReader(testfixtures.Read(t, "bad", "unknown_tag.acbak")), acbak.Options{KeepUnknown: true}).All() {
		if err != nil {
			t.Fatal(err)
		}
		if f.Record.Tag() == "FutureRecord" {
			want = f.Payload
		}
	}
	bus := testBus(t)
	replay(t, bus, archive)
	msg, err := bus.Stream.GetLastMsgForSubject(context.Background(), "specstar.issue.x")
	if err != nil {
		t.Fatalf("no event for the unknown tag: %v", err)
	}
	if !bytes.Equal(msg.Data, want) || msg.Header.Get(events.HeaderTag) != "FutureRecord" {
		t.Fatalf("event %x (tag %q), want the frame %x", msg.Data, msg.Header.Get(events.HeaderTag), want)
	}
	dir := t.TempDir()
	out := drain(t, bus, dir)
	if !strings.Contains(out, "0 dead-lettered") {
		t.Fatalf("the unknown record must be skipped, not dead-lettered: %s", out)
	}
}

// pgDSN is the test server: $PG_DSN or the machine's local Postgres.
func pgDSN() string {
	if dsn := os.Getenv("PG_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// TestPostgresAndDiskSinks: one replicator run feeds a Postgres sink (metas
// and revisions, SpecStar's PostgresMetaStore/PostgresResourceStore
// tables) and a disk sink through two durable consumers, and both verify
// equal to the archive.
func TestPostgresAndDiskSinks(t *testing.T) {
	ctx := context.Background()
	conn, prefix := pgTables(t, "e2e")
	pg := pgDSN() + pgSep() + "table_prefix=" + prefix + "&revisions=true"
	dir := t.TempDir()
	for _, name := range []string{"small.acbak", "msgpack.acbak"} {
		bus := testBus(t)
		replay(t, bus, testfixtures.Path(t, name))
		out := drain(t, bus, pg, dir)
		if strings.Count(out, " 0 dead-lettered") != 2 {
			t.Fatalf("%s: %s", name, out)
		}
		for _, s := range []string{pg, dir} {
			if code, out, errs := runCmd(t, "verify", "--archive", testfixtures.Path(t, name), "--sink", s); code != exitOK {
				t.Fatalf("%s: verify %s: exit %d\n%s%s", name, source.Redact(s), code, out, errs)
			}
		}
		// Rewind the disk sink for the next archive's models.
		dir = t.TempDir()
	}
	// The tables are SpecStar's: one meta table per model, the resource
	// tables shared, '__none__' for a null schema version.
	var metas, nones int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM "`+prefix+`issue_meta"`).Scan(&metas); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM "`+prefix+`resource_index" WHERE schema_version = '__none__'`).Scan(&nones); err != nil {
		t.Fatal(err)
	}
	if metas != 4 || nones == 0 {
		t.Fatalf("issue_meta has %d rows (want 4), %d index rows with __none__", metas, nones)
	}
}

func pgxConnect(ctx context.Context, dsn string) (*pgx.Conn, error) { return pgx.Connect(ctx, dsn) }

// TestMissingObjectIsDeadLettered: a BlobRefRecord whose object is gone
// from the object store can never be applied; it is dead-lettered rather
// than retried forever.
func TestMissingObjectIsDeadLettered(t *testing.T) {
	bus := testBus(t)
	if _, err := bus.Blobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	publishRaw(t, bus, "issue", &events.BlobRefRecord{FileID: "64d2f845e7abbc3eaffacd9148e270be", Size: 70000, Bucket: bus.BlobBucket()}, nil)
	out := drain(t, bus, t.TempDir())
	if !strings.Contains(out, "1 dead-lettered") {
		t.Fatalf("want the blob reference dead-lettered: %s", out)
	}
}

// TestStatus: after a drain, status shows the sink caught up with its
// dead letters counted; with new events, it shows them pending.
func TestStatus(t *testing.T) {
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	publishRaw(t, bus, "issue", &events.MetaRecord{Data: []byte{0xc1}}, nil)
	drain(t, bus, t.TempDir()+"?name=statussink")
	code, out, _ := runCmd(t, "status", "--nats", bus.URL(), "--json")
	if code != exitOK {
		t.Fatalf("status: exit %d", code)
	}
	var got struct {
		Sinks []replicate.SinkStatus `json:"sinks"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Sinks) != 1 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	s := got.Sinks[0]
	if s.Name != "statussink" || s.Pending != 0 || s.AckPending != 0 || s.AckFloor != s.StreamLast || s.DeadLetters != 1 {
		t.Fatalf("after a drain: %+v", s)
	}
	if !strings.Contains(s.LastError, "dead-letter") || !strings.Contains(s.LastError, "not a valid ResourceMeta") || s.LastErrorAt == "" {
		t.Fatalf("last error %q at %q, want the dead letter's reason", s.LastError, s.LastErrorAt)
	}
	replay(t, bus, testfixtures.Path(t, "msgpack.acbak"))
	// The bus named by a configuration file, as a region's operator runs it.
	cfg := filepath.Join(t.TempDir(), "region.yaml")
	if err := os.WriteFile(cfg, []byte("nats:\n  url: "+bus.URL()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, out, _ = runCmd(t, "status", "--config", cfg, "--json")
	got.Sinks = nil
	json.Unmarshal([]byte(out), &got)
	if len(got.Sinks) != 1 {
		t.Fatalf("status --config: %s", out)
	}
	if s := got.Sinks[0]; s.Pending == 0 || s.OldestUnacked == "" {
		t.Fatalf("with new events: %+v", s)
	}
}

// TestGapIsRefused: when retention removed events a sink never applied,
// the replicator refuses to go on silently and says what to do;
// --accept-gap goes on.
func TestGapIsRefused(t *testing.T) {
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	if err := bus.Stream.Purge(context.Background(), jetstream.WithPurgeSequence(5)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", dir)
	if code != exitError || !strings.Contains(errs, "were removed (retention) before this sink saw them") || !strings.Contains(errs, "--accept-gap") {
		t.Fatalf("want a refusal naming the gap: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--accept-gap", "--sink", dir); code != exitOK {
		t.Fatalf("--accept-gap: exit %d\n%s%s", code, out, errs)
	}
}

// pgTables connects to the test Postgres with a fresh table prefix made
// from stem; the prefix's tables are dropped at cleanup.
func pgTables(t *testing.T, stem string) (*pgx.Conn, string) {
	t.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("%s_%d_", stem, time.Now().UnixNano()%1_000_000_000)
	conn, err := pgxConnect(ctx, pgDSN())
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgDSN(), err)
	}
	t.Cleanup(func() {
		rows, _ := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE tablename LIKE $1", prefix+"%")
		var names []string
		for rows.Next() {
			var n string
			rows.Scan(&n)
			names = append(names, n)
		}
		rows.Close()
		for _, n := range names {
			conn.Exec(ctx, `DROP TABLE IF EXISTS "`+n+`" CASCADE`)
		}
		conn.Close(ctx)
	})
	return conn, prefix
}

// pgSep is what joins a query parameter to PG_DSN.
func pgSep() string {
	if strings.Contains(pgDSN(), "?") {
		return "&"
	}
	return "?"
}

// TestRunDefaultsToGroupCommit: `replicator run` into a disk sink whose
// URL does not say sync= makes each batch durable with one syncfs
// (sync=batch, the mode that keeps up with a live source), a URL's
// sync=file is kept, and --json says which mode ran.
func TestRunDefaultsToGroupCommit(t *testing.T) {
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	for _, tc := range []struct{ opts, want string }{{"", "batch"}, {"?sync=file", "file"}, {"?sync=batch", "batch"}} {
		dir := t.TempDir()
		code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--json", "--sink", dir+tc.opts)
		if code != exitOK {
			t.Fatalf("%q: exit %d\n%s%s", tc.opts, code, out, errs)
		}
		var got struct {
			Sinks []sinkSummary `json:"sinks"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%q: %v: %s", tc.opts, err, out)
		}
		if len(got.Sinks) != 1 || got.Sinks[0].Sync != tc.want {
			t.Errorf("sink %q ran with sync=%+v, want %s", tc.opts, got.Sinks, tc.want)
		}
		if code, out, _ := runCmd(t, "verify", "--archive", testfixtures.Path(t, "small.acbak"), "--sink", dir); code != exitOK {
			t.Errorf("%q: verify: %s", tc.opts, out)
		}
	}
}
