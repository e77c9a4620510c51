package s3_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
	"github.com/specstar/replicator/sink/s3"
	"github.com/specstar/replicator/sink/sinktest"

	_ "modernc.org/sqlite"
)

// factoryPrefix is where the tests put the factory inside its bucket, so
// the layout below a prefix is what is checked.
const factoryPrefix = "app/"

// TestFactoryConformance runs the sink conformance suite against the
// all-S3 factory: metas in {prefix}{model}/meta.db, revisions and blobs
// beside them, each Open on a fresh bucket.
func TestFactoryConformance(t *testing.T) {
	srv := s3test.Start(t)
	var n atomic.Int64
	sinktest.Run(t, sinktest.Backend{
		Open: func(t *testing.T) sink.Sink {
			bucket := fmt.Sprintf("factory-%d", n.Add(1))
			srv.CreateBucket(t, bucket)
			return openFactory(t, srv, bucket)
		},
		Reopen: func(t *testing.T, s sink.Sink) sink.Sink {
			return openFactory(t, srv, s3.BucketOf(s.(*s3.Factory).Sink))
		},
		Metas: true, Revisions: true, Blobs: true,
		PathMetaIDs: true, PathRevisionIDs: true,
		Outside: func(t *testing.T, s sink.Sink) string {
			return keysBeside(t, srv, s3.BucketOf(s.(*s3.Factory).Sink))
		},
	})
}

func openFactory(t *testing.T, srv *s3test.Server, bucket string) *s3.Factory {
	t.Helper()
	f, err := s3.OpenFactoryOn(context.Background(), srv, bucket, factoryPrefix, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// getObject reads a whole object, failing the test if it is missing.
func getObject(t *testing.T, srv *s3test.Server, bucket, key string) []byte {
	t.Helper()
	out, err := srv.Client(t).GetObject(context.Background(), &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get s3://%s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// downloadDB fetches {prefix}{model}/meta.db and opens it read-only, as
// SpecStar would open its local copy.
func downloadDB(t *testing.T, srv *s3test.Server, bucket, model string) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "meta.db")
	if err := os.WriteFile(path, getObject(t, srv, bucket, factoryPrefix+model+"/meta.db"), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type column struct {
	name, typ   string
	notNull, pk int
}

func columns(t *testing.T, db *sql.DB) []column {
	t.Helper()
	rows, err := db.Query(`PRAGMA table_info(resource_meta)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []column
	for rows.Next() {
		var (
			c    column
			cid  int
			dflt sql.NullString
		)
		if err := rows.Scan(&cid, &c.name, &c.typ, &c.notNull, &dflt, &c.pk); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestFactoryLayout: after the factory-json archive (SpecStar's disk
// factory, json metas and infos), every meta row's data, every info and
// every payload in S3 are byte-equal to the files SpecStar wrote for the
// same records, at the all-S3 factory's keys; meta.db has the resource_meta
// table of SpecStar's file (same columns, types and keys, in order) plus
// the contract's rev_* columns.
func TestFactoryLayout(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "layout")
	f := openFactory(t, srv, "layout")
	recs := sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, "disk-layout", "factory-json.acbak"))
	for _, r := range recs {
		var err error
		switch {
		case r.Meta != nil:
			_, err = f.ApplyMeta(ctx, r.Model, r.Meta)
		case r.Rev != nil:
			_, err = f.ApplyRevision(ctx, r.Model, r.Rev)
		default:
			_, err = f.ApplyBlob(ctx, r.Blob.FileID, r.Blob.Size, r.Blob.ContentType, bytes.NewReader(r.Blob.BlobData))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	tree := testfixtures.Path(t, "disk-layout", "factory-json")
	dbs := map[string]*sql.DB{}
	checked := 0
	for _, r := range recs {
		switch {
		case r.Meta != nil:
			db := dbs[r.Model]
			if db == nil {
				db = downloadDB(t, srv, "layout", r.Model)
				dbs[r.Model] = db
			}
			var data []byte
			if err := db.QueryRow(`SELECT data FROM resource_meta WHERE resource_id = ?`, r.Meta.ResourceID).Scan(&data); err != nil {
				t.Fatalf("%s row %s: %v", r.Model, r.Meta.ResourceID, err)
			}
			want, err := os.ReadFile(filepath.Join(tree, r.Model, "meta", r.Meta.ResourceID+".data"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, want) {
				t.Errorf("%s row %s: data\n got %s\nwant %s", r.Model, r.Meta.ResourceID, data, want)
			}
			checked++
		case r.Rev != nil:
			uid := r.Rev.Info.UID
			for _, name := range []string{"info", "data"} {
				want, err := os.ReadFile(filepath.Join(tree, r.Model, "data", "store", uid, name))
				if err != nil {
					t.Fatal(err)
				}
				got := getObject(t, srv, "layout", factoryPrefix+r.Model+"/resources/store/"+uid+"/"+name)
				if !bytes.Equal(got, want) {
					t.Errorf("%s store/%s/%s:\n got %s\nwant %s", r.Model, uid, name, got, want)
				}
			}
			idx := factoryPrefix + r.Model + "/resources/resource/" + r.Rev.Info.ResourceID + "/" + r.Rev.Info.RevisionID + "/" + store.SchemaDir(r.Rev.Info.SchemaVersion) + "/uid"
			if got := getObject(t, srv, "layout", idx); string(got) != uid {
				t.Errorf("%s: %q, want %q", idx, got, uid)
			}
			checked++
		default:
			if got := getObject(t, srv, "layout", factoryPrefix+"blobs/"+r.Blob.FileID); !bytes.Equal(got, r.Blob.BlobData) {
				t.Errorf("blob %s: %d bytes differ", r.Blob.FileID, len(got))
			}
		}
	}
	if checked == 0 || len(dbs) == 0 {
		t.Fatal("factory-json.acbak checked nothing")
	}
	// The table SpecStar created (its reference file), then the contract's
	// rev_* columns, as SpecStar's newer versions add them.
	ref := filepath.Join(t.TempDir(), "ref.db")
	if err := os.WriteFile(ref, testfixtures.Read(t, "disk-layout", "sqlite-msgpack", "issue", "meta.db"), 0o644); err != nil {
		t.Fatal(err)
	}
	refDB, err := sql.Open("sqlite", "file:"+ref+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer refDB.Close()
	want := append(columns(t, refDB),
		column{"rev_status", "TEXT", 0, 0}, column{"rev_created_by", "TEXT", 0, 0}, column{"rev_updated_by", "TEXT", 0, 0},
		column{"rev_created_time", "REAL", 0, 0}, column{"rev_updated_time", "REAL", 0, 0})
	for model, db := range dbs {
		if got := columns(t, db); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s meta.db columns:\n got %v\nwant %v", model, got, want)
		}
	}
}

// TestFactoryOpensSpecStarFile: a meta.db SpecStar wrote (its reference
// file, msgpack metas) is read as it is: its metas read back and applying
// them again is Unchanged, and the file is not uploaded again.
func TestFactoryOpensSpecStarFile(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "specstar")
	c := srv.Client(t)
	put, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String("specstar"), Key: aws.String(factoryPrefix + "issue/meta.db"),
		Body: bytes.NewReader(testfixtures.Read(t, "disk-layout", "sqlite-msgpack", "issue", "meta.db"))})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := s3.ParseSpec("s3://specstar/" + factoryPrefix + "?factory=s3&encoding=msgpack&path_style=true&endpoint=" + srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	f, err := spec.OpenFactory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, r := range sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, "disk-layout", "sqlite-msgpack.acbak")) {
		if r.Meta == nil {
			continue
		}
		got, err := f.Meta(ctx, r.Model, r.Meta.ResourceID)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := got.Encode(events.Msgpack); !bytes.Equal(b, r.Raw) {
			t.Errorf("%s: the meta read back differs from the archive", r.Meta.ResourceID)
		}
		if out, err := f.ApplyMeta(ctx, r.Model, r.Meta); err != nil || out != sink.Unchanged {
			t.Errorf("%s: %v %v, want unchanged", r.Meta.ResourceID, out, err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no metas in sqlite-msgpack.acbak")
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String("specstar"), Key: aws.String(factoryPrefix + "issue/meta.db")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(h.ETag) != aws.ToString(put.ETag) {
		t.Error("meta.db was uploaded again though nothing changed")
	}
}

// TestFactoryOddModelNames: model names full of URL and path syntax, or
// not ASCII, get their own meta.db (and local copy) and read back after a
// restart; the cache directory is gone after Close.
func TestFactoryOddModelNames(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "odd")
	cache := t.TempDir()
	f, err := s3.OpenFactoryOn(ctx, srv, "odd", factoryPrefix, cache)
	if err != nil {
		t.Fatal(err)
	}
	models := []string{"we?ird#mo%del", "日本", "a b", ".hidden", "..x", "blobs-not"}
	for _, m := range models {
		if _, err := f.ApplyMeta(ctx, m, sinktestutil.Meta(t, "r:1", "2024-05-01T00:00:00Z", 1, m)); err != nil {
			t.Fatalf("%q: %v", m, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(cache); len(left) != 0 {
		t.Errorf("the cache directory holds %d entries after Close", len(left))
	}
	g := openFactory(t, srv, "odd")
	for _, m := range models {
		got, err := g.Meta(ctx, m, "r:1")
		if err != nil || got.UpdatedBy != m {
			t.Errorf("%q: %v %v", m, got, err)
		}
	}
	listed, err := g.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(listed) != fmt.Sprint([]string{"..x", ".hidden", "a b", "blobs-not", "we?ird#mo%del", "日本"}) {
		t.Errorf("models listed: %q", listed)
	}
}

// TestFactoryCacheIsBounded: with cache_models=2, applying metas to five
// models leaves at most two local copies loaded (the others were
// uploaded first), and every meta still reads back.
func TestFactoryCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "bounded")
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	cache := t.TempDir()
	spec, err := s3.ParseSpec("s3://bounded/app/?factory=s3&cache_models=2&path_style=true&cache_dir=" + cache + "&endpoint=" + srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.OpenFactory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 5 {
		model := fmt.Sprintf("m%d", i)
		if _, err := f.ApplyMeta(ctx, model, sinktestutil.Meta(t, "r:1", "2024-05-01T00:00:00Z", 1, model)); err != nil {
			t.Fatal(err)
		}
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dirs, _ := os.ReadDir(cache)
	if len(dirs) != 1 {
		t.Fatalf("%d cache directories, want 1", len(dirs))
	}
	files, _ := filepath.Glob(filepath.Join(cache, dirs[0].Name(), "*.db"))
	if len(files) > 2 {
		t.Errorf("%d local copies with cache_models=2", len(files))
	}
	for i := range 5 {
		model := fmt.Sprintf("m%d", i)
		if got, err := f.Meta(ctx, model, "r:1"); err != nil || got.UpdatedBy != model {
			t.Errorf("%s: %v %v", model, got, err)
		}
	}
}
