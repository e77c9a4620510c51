package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/internal/testsupport/testsize"
	"github.com/specstar/replicator/stream"
)

// A SpecStar Postgres+S3 deployment for the writer's commands: metas in
// Postgres (dsn), revisions in bucket "deploy" and blobs in bucket
// "files" of a real versitygw, written by the test writer with the AWS
// SDK. want holds every record the deployment's writes produced, keyed as
// recordSet keys them (model, then the record's msgpack), current holds
// those of the current state only.
type pgS3Deployment struct {
	t         *testing.T
	srv       *s3test.Server
	w         *specstarpg.Writer
	from      string // postgres URL with the table prefix
	resources string // s3:// URL of the resource store
	blobs     string // s3:// URL of the blob store
	all       map[string]bool
	metaKeys  map[string]bool   // the record keys of every meta written
	metas     map[string]string // model|rid -> the record key of its current meta
	blobData  map[string][]byte
}

func newPGS3Deployment(t *testing.T, dsn string) *pgS3Deployment {
	t.Helper()
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "deploy")
	srv.CreateBucket(t, "files")
	for _, kv := range srv.Env() { // the writer takes S3 credentials from the AWS chain
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	prefix := fmt.Sprintf("ws3_%d_", time.Now().UnixNano()%1_000_000_000)
	w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: prefix,
		S3: &specstarpg.S3Target{Client: srv.Client(t), Bucket: "deploy", BlobBucket: "files"}})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", dsn, err)
	}
	t.Cleanup(func() { w.DropAll(context.Background()); w.Close() })
	for _, m := range []string{"doc", "issue"} {
		if err := w.CreateModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	q := "?endpoint=" + url.QueryEscape(srv.Endpoint) + "&region=" + srv.Region + "&path_style=true"
	return &pgS3Deployment{t: t, srv: srv, w: w, from: dsn + sep + "table_prefix=" + prefix,
		resources: "s3://deploy" + q, blobs: "s3://files" + q,
		all: map[string]bool{}, metaKeys: map[string]bool{}, metas: map[string]string{}, blobData: map[string][]byte{}}
}

func recordKey(t *testing.T, model string, rec events.Record) string {
	t.Helper()
	b, err := rec.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	return model + "\x00" + string(b)
}

// write records a write's meta and revision.
func (d *pgS3Deployment) write(wr *specstarpg.Written, err error) {
	t := d.t
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	meta := recordKey(t, wr.Model, &events.MetaRecord{Data: wr.MetaData})
	d.all[meta], d.metaKeys[meta] = true, true
	d.metas[wr.Model+"|"+wr.Meta.ResourceID] = meta
	d.all[recordKey(t, wr.Model, &events.RevisionRecord{Data: mustEncode(t, &events.RawResource{Info: *wr.Info, RawData: wr.Data})})] = true
}

func mustEncode(t *testing.T, v interface {
	Encode(events.Encoding) ([]byte, error)
}) []byte {
	t.Helper()
	b, err := v.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putBlob stores a blob; model is the one whose payloads will reference it.
func (d *pgS3Deployment) putBlob(t *testing.T, model string, data []byte, ct string) specstarpg.Blob {
	t.Helper()
	b, err := d.w.PutBlob(context.Background(), bytes.NewReader(data), ct)
	if err != nil {
		t.Fatal(err)
	}
	d.blobData[b.FileID] = data
	if ct == "" {
		ct = s3test.DefaultContentType // what SpecStar reads back, so what travels
	}
	if model != "" {
		d.all[recordKey(t, model, &events.BlobRecord{FileID: b.FileID, BlobData: data, Size: int64(len(data)), ContentType: ct})] = true
	}
	return b
}

func docPayload(title string, files ...specstarpg.Blob) events.Value {
	var refs []any
	for _, f := range files {
		refs = append(refs, f.Value())
	}
	return events.Struct{Declared: 2, Fields: []events.StructField{{Name: "title", Value: title}, {Name: "files", Value: refs}}}
}

// populate writes two docs referencing four blobs (one of 2 MiB, more
// than a message) and three issues, some updated.
func (d *pgS3Deployment) populate(t *testing.T) {
	ctx := context.Background()
	w := d.w
	small := d.putBlob(t, "doc", []byte("hello"), "text/plain")
	large := d.putBlob(t, "doc", bytes.Repeat([]byte("0123456789abcdef"), 2<<20/16), "application/octet-stream")
	pdf := d.putBlob(t, "doc", []byte("%PDF-1.4"), "application/pdf")
	// No content type: S3 answers a default one, which SpecStar reads back
	// and so which travels.
	untyped := d.putBlob(t, "doc", []byte("no type given"), "")
	d.write(w.Create(ctx, "doc", "doc:1", docPayload("one", small), specstarpg.Write{}))
	d.write(w.Update(ctx, "doc", "doc:1", docPayload("one+", small, large), specstarpg.Write{}))
	d.write(w.Create(ctx, "doc", "doc:2", docPayload("two", pdf, untyped), specstarpg.Write{SchemaVersion: events.Some("v1")}))
	for i := 1; i <= 3; i++ {
		rid := fmt.Sprintf("issue:%d", i)
		d.write(w.Create(ctx, "issue", rid, payload(rid, 0), specstarpg.Write{}))
		if i != 2 {
			d.write(w.Update(ctx, "issue", rid, payload(rid, 1), specstarpg.Write{}))
		}
	}
}

// current is the records of the current state: every revision and blob,
// and only the latest meta of each resource.
func (d *pgS3Deployment) current() map[string]bool {
	cur := map[string]bool{}
	for k := range d.all {
		if !d.metaKeys[k] {
			cur[k] = true
		}
	}
	for _, m := range d.metas {
		cur[m] = true
	}
	return cur
}

// TestExportPostgresS3: `writer export --from postgres://... --resources
// s3://... --blobs s3://...` of a Postgres+S3 deployment writes an archive
// that verifies and holds exactly the deployment's metas, revisions and
// referenced blobs (each in its model's section).
func TestExportPostgresS3(t *testing.T) {
	d := newPGS3Deployment(t, pgDSN())
	d.populate(t)
	d.putBlob(t, "", []byte("referenced by nobody"), "text/plain") // not exported
	out := filepath.Join(t.TempDir(), "pgs3.acbak")
	code, stdout, stderr := runWriter(t, "export", "--from", d.from, "--resources", d.resources, "--blobs", d.blobs, out)
	if code != exitOK {
		t.Fatalf("export: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "2 models, 5 metas, 8 revisions, 4 blobs (0 referenced but missing)") {
		t.Errorf("export summary: %s", stdout)
	}
	if code, vout, _ := runWriter(t, "verify", "--require-current", out); code != exitOK {
		t.Fatalf("the exported archive does not verify:\n%s", vout)
	}
	compareSets(t, "archive", recordSet(t, out), d.current())

	// The same deployment named in a configuration file.
	cfg := filepath.Join(t.TempDir(), "specstar.yaml")
	yaml := "deployments:\n  prod:\n    meta: " + d.from + "\n    resources: " + d.resources + "\n    blobs: " + d.blobs + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	named := filepath.Join(t.TempDir(), "named.acbak")
	if code, stdout, stderr := runWriter(t, "export", "--config", cfg, "--from", "prod", named); code != exitOK {
		t.Fatalf("export --config --from prod: exit %d\n%s%s", code, stdout, stderr)
	}
	compareSets(t, "archive of the named deployment", recordSet(t, named), d.current())

	// Without --blobs the blobs come from the resource store's own blob
	// location (bucket "deploy", blobs/): here it holds none, an error
	// unless --allow-missing-blobs, which reports them missing.
	code, stdout, stderr = runWriter(t, "export", "--from", d.from, "--resources", d.resources, out, "--force", "--allow-missing-blobs")
	if code != exitOK || !strings.Contains(stdout, "0 blobs (4 referenced but missing)") {
		t.Fatalf("export without --blobs: exit %d\n%s%s", code, stdout, stderr)
	}
}

func compareSets(t *testing.T, what string, got, want map[string]bool) {
	t.Helper()
	for k := range want {
		if !got[k] {
			t.Errorf("%s lacks a record of the deployment (%.80q)", what, k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("%s holds a record the deployment did not write (%.80q)", what, k)
		}
	}
}

// streamSet reads every event of the stream as recordSet keys: a blob
// that went through the object store is read back and keyed as the
// BlobRecord it stands for.
func streamSet(t *testing.T, bus *stream.Bus) map[string]bool {
	t.Helper()
	ctx := context.Background()
	info, err := bus.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := bus.Stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		model := msg.Header.Get(events.HeaderModel)
		rec, err := events.DecodeRecord(events.Msgpack, msg.Data)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		if u, ok := rec.(*events.UnknownRecord); ok && u.RecordTag == events.TagBlobRef {
			ref, err := events.DecodeBlobRef(msg.Data)
			if err != nil {
				t.Fatalf("stream message %d: %v", seq, err)
			}
			r, err := bus.OpenBlob(ctx, ref.Bucket, ref.FileID)
			if err != nil {
				t.Fatalf("blob %s: %v", ref.FileID, err)
			}
			data, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			rec = &events.BlobRecord{FileID: ref.FileID, BlobData: data, Size: ref.Size, ContentType: ref.ContentType}
		}
		set[recordKey(t, model, rec)] = true
	}
	return set
}

// waitStream waits until the stream holds every record of want, then
// checks it holds nothing the deployment did not write (all).
func waitStream(t *testing.T, bus *stream.Bus, step string, want, all map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := streamSet(t, bus)
		missing := 0
		for k := range want {
			if !got[k] {
				missing++
			}
		}
		if missing == 0 {
			for k := range got {
				if !all[k] {
					t.Errorf("%s: the stream holds a record the deployment did not write (%.80q)", step, k)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d records of the deployment never reached the stream", step, missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTailPostgresS3Poll: `writer tail --mode poll --resources s3://...
// --blobs s3://...` publishes a Postgres+S3 deployment's snapshot and then
// each new write with its revisions and the blobs they reference.
func TestTailPostgresS3Poll(t *testing.T) {
	tailS3Scenario(t, pgDSN(), "poll")
}

// TestTailPostgresS3Logical: the same by logical replication, on a
// wal_level=logical cluster (the publication covers the meta tables only:
// the revisions are in S3).
func TestTailPostgresS3Logical(t *testing.T) {
	tailS3Scenario(t, pgtest.LogicalCluster(t), "logical")
}

func tailS3Scenario(t *testing.T, dsn, mode string) {
	ctx := context.Background()
	d := newPGS3Deployment(t, dsn)
	d.populate(t)
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan string, 1)
	go func() {
		var out, errb bytes.Buffer
		run(tctx, []string{"tail", "--from", d.from, "--resources", d.resources, "--blobs", d.blobs, "--mode", mode,
			"--nats", bus.URL(), "--interval", "100ms", "--listen", ""}, &out, &errb)
		done <- out.String() + errb.String()
	}()
	waitStream(t, bus, "the snapshot", d.current(), d.all)

	// New writes: an update referencing a new large blob, and a create.
	w := d.w
	big := d.putBlob(t, "doc", bytes.Repeat([]byte("fedcba9876543210"), 3<<20/16), "application/octet-stream")
	d.write(w.Update(ctx, "doc", "doc:2", docPayload("two+", big), specstarpg.Write{SchemaVersion: events.Some("v1")}))
	d.write(w.Create(ctx, "issue", "issue:new", payload("new", 0), specstarpg.Write{}))
	waitStream(t, bus, "the tailed writes", d.current(), d.all)
	cancel()
	if out := <-done; !strings.Contains(out, "("+mode+") stopped") {
		t.Fatalf("tail: want mode %s:\n%s", mode, out)
	}
}

// TestSnapshotS3Alone: `writer snapshot --resources s3://...` without a
// Postgres publishes every revision of every model and every blob of the
// blob store (referenced or not), and no metas.
func TestSnapshotS3Alone(t *testing.T) {
	ctx := context.Background()
	d := newPGS3Deployment(t, pgDSN())
	d.populate(t)
	orphan := d.putBlob(t, "", []byte("referenced by nobody"), "text/plain")
	want := map[string]bool{}
	for k := range d.all {
		if !d.metaKeys[k] {
			want[k] = true
		}
	}
	// An unreferenced blob travels under the first model.
	want[recordKey(t, "doc", &events.BlobRecord{FileID: orphan.FileID, BlobData: d.blobData[orphan.FileID], Size: 20, ContentType: "text/plain"})] = true
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	code, out, errs := runWriter(t, "snapshot", "--resources", d.resources, "--blobs", d.blobs, "--nats", bus.URL())
	if code != exitOK || !strings.Contains(out, "models [doc issue], 8 revisions, 5 blobs (1 referenced by no revision)") {
		t.Fatalf("snapshot: exit %d\n%s%s", code, out, errs)
	}
	compareSets(t, "stream", streamSet(t, bus), want)
}

// TestArchivePostgresS3RoundTrip: an archive replayed into a Postgres+S3
// deployment sink (metas in Postgres, revisions and blobs in S3, the
// replicator's --meta/--resources/--blobs), then exported back with writer
// export, holds the same metas, revisions and blobs, byte for byte; and
// `replicator verify` finds the deployment equal to the archive.
func TestArchivePostgresS3RoundTrip(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	srv := s3test.Start(t)
	for _, kv := range srv.Env() { // both commands take S3 credentials from the AWS chain
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	q := "?endpoint=" + url.QueryEscape(srv.Endpoint) + "&region=" + srv.Region + "&path_style=true"
	archives := []string{"small.acbak", "blobs.acbak"}
	if testsize.Long() {
		archives = append(archives, "medium.acbak") // 2,020 revisions: half a minute through versitygw
	}
	for i, name := range archives {
		t.Run(name, func(t *testing.T) {
			archive := testfixtures.Path(t, name)
			bucket := fmt.Sprintf("rt%d", i)
			srv.CreateBucket(t, bucket)
			resources, blobs := "s3://"+bucket+"/{model}/data/"+q, "s3://"+bucket+"/blobs/"+q
			conn, bus, pg, prefix := replayWithTables(t, archive, "rts3")
			if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "",
				"--meta", pg, "--resources", resources, "--blobs", blobs).CombinedOutput(); err != nil {
				t.Fatalf("replicator run: %v\n%s", err, out)
			}
			// The S3 side holds SpecStar's keys, not a Postgres copy.
			if n := countRows(t, conn, prefix+"resource_data"); n != 0 {
				t.Fatalf("%d revisions went to Postgres; they belong in S3", n)
			}
			exported := filepath.Join(t.TempDir(), "export.acbak")
			if code, out, errs := runWriter(t, "export", exported, "--from", pg, "--resources", resources, "--blobs", blobs); code != exitOK {
				t.Fatalf("export: %d\n%s%s", code, out, errs)
			}
			if code, out, _ := runWriter(t, "verify", exported); code != exitOK {
				t.Fatalf("the exported archive does not verify:\n%s", out)
			}
			want, got := recordSet(t, archive), recordSet(t, exported)
			if len(want) == 0 || len(got) != len(want) {
				t.Errorf("exported %d distinct records, the archive holds %d", len(got), len(want))
			}
			for k := range want {
				if !got[k] {
					t.Errorf("a record of the archive is missing from the export (%.60q)", k)
				}
			}
			cfg := filepath.Join(t.TempDir(), "specstar.yaml")
			yaml := "deployments:\n  restored:\n    meta: " + pg + "\n    resources: " + resources + "\n    blobs: " + blobs + "\n"
			if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(repl, "verify", "--archive", archive, "--config", cfg, "--sink", "restored").CombinedOutput(); err != nil || !strings.Contains(string(out), "equal") {
				t.Fatalf("verify: %v\n%s", err, out)
			}
		})
	}
}

func countRows(t *testing.T, conn *pgx.Conn, table string) int {
	t.Helper()
	var n int
	err := conn.QueryRow(context.Background(), `SELECT count(*) FROM "`+table+`"`).Scan(&n)
	if err != nil && !strings.Contains(err.Error(), "does not exist") {
		t.Fatal(err)
	}
	return n
}

// TestExportPostgresS3SharedBlob: a blob referenced by two models is
// written in both models' sections, as SpecStar's dump writes it
// (BlobRecord* between each model's ModelStart and ModelEnd); export once
// wrote it only in the first model's section (issue 25, item 1).
func TestExportPostgresS3SharedBlob(t *testing.T) {
	d := newPGS3Deployment(t, pgDSN())
	ctx := context.Background()
	shared := d.putBlob(t, "doc", []byte("shared by doc and issue"), "text/plain")
	d.all[recordKey(t, "issue", &events.BlobRecord{FileID: shared.FileID, BlobData: []byte("shared by doc and issue"), Size: 23, ContentType: "text/plain"})] = true
	own := d.putBlob(t, "doc", []byte("doc's own"), "text/plain")
	d.write(d.w.Create(ctx, "doc", "doc:1", docPayload("one", shared, own), specstarpg.Write{}))
	d.write(d.w.Create(ctx, "issue", "issue:1", docPayload("bug", shared), specstarpg.Write{}))
	check := func(what, out, summary string) {
		t.Helper()
		if !strings.Contains(summary, "2 models, ") || !strings.Contains(summary, "3 blobs") {
			t.Errorf("%s: export summary: %s", what, summary)
		}
		order, blobs := sectionBlobs(t, out)
		if !slices.Equal(order, []string{"doc", "issue"}) {
			t.Errorf("%s: model sections %v, want [doc issue]", what, order)
		}
		if got := blobs["issue"]; !slices.Equal(got, []string{shared.FileID}) {
			t.Errorf("%s: issue's section holds blobs %v, want the shared %s", what, got, shared.FileID)
		}
		if got := blobs["doc"]; len(got) != 2 || !slices.Contains(got, shared.FileID) || !slices.Contains(got, own.FileID) {
			t.Errorf("%s: doc's section holds blobs %v, want %s and %s", what, got, shared.FileID, own.FileID)
		}
	}
	out := filepath.Join(t.TempDir(), "shared.acbak")
	code, stdout, stderr := runWriter(t, "export", "--from", d.from, "--resources", d.resources, "--blobs", d.blobs, "--to", out)
	if code != exitOK {
		t.Fatalf("export: exit %d\n%s%s", code, stdout, stderr)
	}
	check("Postgres+S3", out, stdout)
	compareSets(t, "archive", recordSet(t, out), d.current())

	// The S3 resource store alone (no metas) once listed the blob store
	// after every model, each blob in its first model's section.
	alone := filepath.Join(t.TempDir(), "alone.acbak")
	code, stdout, stderr = runWriter(t, "export", "--from", d.resources, "--blobs", d.blobs, "--to", alone)
	if code != exitOK {
		t.Fatalf("export of the S3 store alone: exit %d\n%s%s", code, stdout, stderr)
	}
	check("S3 alone", alone, stdout)
}

// sectionBlobs reads an archive's model sections in order and the file
// ids of the BlobRecords inside each.
func sectionBlobs(t *testing.T, path string) (order []string, blobs map[string][]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs = map[string][]string{}
	model := ""
	for fr, err := range acbak.NewReader(f, acbak.Options{}).All() {
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch r := fr.Record.(type) {
		case *events.ModelStartRecord:
			model = r.ModelName
			order = append(order, model)
		case *events.BlobRecord:
			if model == "" {
				t.Errorf("%s: blob %s outside a model section", path, r.FileID)
			}
			blobs[model] = append(blobs[model], r.FileID)
		case *events.ModelEndRecord:
			model = ""
		}
	}
	return order, blobs
}
