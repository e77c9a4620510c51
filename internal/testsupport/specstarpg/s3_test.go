package specstarpg

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/s3test"
)

func pgDSN() string { return pgtest.SharedDSN() }

func randomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "sp_" + hex.EncodeToString(b[:]) + "_"
}

// openS3Writer starts versitygw with buckets "deploy" and "files" and opens
// a writer of the Postgres+S3 deployment on a fresh table prefix.
func openS3Writer(t *testing.T, target S3Target) (*Writer, *s3.Client) {
	t.Helper()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "deploy")
	srv.CreateBucket(t, "files")
	client := srv.Client(t)
	target.Client = client
	w, err := Open(context.Background(), pgDSN(), Options{TablePrefix: randomPrefix(), S3: &target})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgDSN(), err)
	}
	t.Cleanup(func() {
		if err := w.DropAll(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		w.Close()
	})
	return w, client
}

// listAll lists a bucket with the SDK: key -> body.
func listAll(t *testing.T, c *s3.Client, bucket string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	out := map[string][]byte{}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatalf("get %s/%s: %v", bucket, *o.Key, err)
			}
			b, err := io.ReadAll(obj.Body)
			obj.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[*o.Key] = b
		}
	}
	return out
}

func doc(title string, files ...Blob) events.Value {
	fields := []events.StructField{{Name: "title", Value: title}}
	for i, f := range files {
		fields = append(fields, events.StructField{Name: fmt.Sprintf("file%d", i), Value: f.Value()})
	}
	return events.Struct{Declared: 3, Fields: fields}
}

// TestS3ModeWritesTheContractKeys: every write leaves exactly the objects
// the contract names ({model}/data/resources/store/{uid}/data and /info,
// resource/{rid}/{rev}/{v_x|no_ver}/uid), with the bytes written, the
// meta row in Postgres, and blobs at blobs/{file_id} with their
// ContentType; a payload's Binary reference is found by our reference
// finder.
func TestS3ModeWritesTheContractKeys(t *testing.T) {
	ctx := context.Background()
	w, client := openS3Writer(t, S3Target{Bucket: "deploy", BlobBucket: "files"})
	if err := w.CreateModel(ctx, "doc"); err != nil {
		t.Fatal(err)
	}
	small, err := w.PutBlobBytes(ctx, []byte("hello"), "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	again, err := w.PutBlob(ctx, bytes.NewReader([]byte("hello")), "text/plain")
	if err != nil || !again.Existed || again.FileID != small.FileID {
		t.Fatalf("the same bytes again: %+v, %v (want the existing object)", again, err)
	}
	bare, err := w.PutBlobBytes(ctx, []byte{}, "")
	if err != nil {
		t.Fatal(err)
	}

	var written []*Written
	must := func(wr *Written, err error) *Written {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, wr)
		return wr
	}
	must(w.Create(ctx, "doc", "doc:1", doc("one", small, bare), Write{}))
	must(w.Update(ctx, "doc", "doc:1", doc("one, edited", small), Write{}))
	must(w.Update(ctx, "doc", "doc:1", doc("one, migrated", small), Write{SchemaVersion: events.Some("v2")}))
	must(w.Create(ctx, "doc", "doc/with/slashes", doc("two"), Write{SchemaVersion: events.Some("v1")}))
	if _, err := w.Update(ctx, "doc", "doc:1", doc("one, migrated", small), Write{SchemaVersion: events.Some("v2")}); !errors.Is(err, ErrSameData) {
		t.Fatalf("an update with the current payload: %v, want ErrSameData (the current info is read back from S3)", err)
	}

	want := map[string][]byte{}
	for _, wr := range written {
		base := "doc/data/resources/"
		psv := "no_ver"
		if wr.Info.SchemaVersion.IsSet() {
			psv = "v_" + wr.Info.SchemaVersion.Value
		}
		keys := []string{
			base + "store/" + wr.Info.UID + "/data",
			base + "store/" + wr.Info.UID + "/info",
			base + "resource/" + wr.Info.ResourceID + "/" + wr.Info.RevisionID + "/" + psv + "/uid",
		}
		if !slices.Equal(wr.Keys, keys) {
			t.Errorf("%s: wrote keys %q, want %q in that order", wr.Info.RevisionID, wr.Keys, keys)
		}
		want[keys[0]], want[keys[1]], want[keys[2]] = wr.Data, wr.InfoData, []byte(wr.Info.UID)
		info, err := events.DecodeRevisionInfo(events.Msgpack, wr.InfoData)
		if err != nil || info.UID != wr.Info.UID || info.DataHash.Value != dedup.DataHash(wr.Data) {
			t.Errorf("%s: info object is not the msgpack RevisionInfo of the payload: %+v %v", wr.Info.RevisionID, info, err)
		}
	}
	got := listAll(t, client, "deploy")
	if len(got) != len(want) {
		t.Errorf("bucket deploy holds %d objects, want %d: %q", len(got), len(want), slices.Sorted(func(y func(string) bool) {
			for k := range got {
				if !y(k) {
					return
				}
			}
		}))
	}
	for k, b := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, b) {
			t.Errorf("object %s: %q (present %v), want %q", k, g, ok, b)
		}
	}
	if wr := written[2]; wr.Info.ParentRevisionID.Value != "doc:1:2" || wr.Info.ParentSchemaVersion.Present && wr.Info.ParentSchemaVersion.IsSet() {
		t.Errorf("migrated revision: parent %+v / %+v, want doc:1:2 / None", wr.Info.ParentRevisionID, wr.Info.ParentSchemaVersion)
	}

	// The meta rows, as in the Postgres-only deployment.
	for _, wr := range []*Written{written[2], written[3]} {
		var data []byte
		if err := w.pool.QueryRow(ctx, `SELECT data FROM `+ident(w.MetaTable("doc"))+` WHERE resource_id = $1`, wr.Meta.ResourceID).Scan(&data); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, wr.MetaData) {
			t.Errorf("meta row %s differs from what was written", wr.Meta.ResourceID)
		}
	}
	var tables int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ($1, $2)`, w.DataTable(), w.IndexTable()).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("the Postgres+S3 deployment has %d resource tables (%v), want none", tables, err)
	}

	// Blobs: raw bytes at blobs/{file_id}, ContentType set when given.
	blobs := listAll(t, client, "files")
	for _, b := range []struct {
		blob Blob
		data []byte
		ct   string
	}{{small, []byte("hello"), "text/plain"}, {bare, []byte{}, ""}} {
		key := "blobs/" + dedup.FileID(b.data)
		if b.blob.Key != key || b.blob.FileID != dedup.FileID(b.data) || b.blob.Size != int64(len(b.data)) {
			t.Errorf("blob %+v, want key %s", b.blob, key)
		}
		if g, ok := blobs[key]; !ok || !bytes.Equal(g, b.data) {
			t.Errorf("blob object %s: %q, %v", key, g, ok)
		}
		head, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("files"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		if b.ct != "" && aws.ToString(head.ContentType) != b.ct {
			t.Errorf("blob %s ContentType %q, want %q", key, aws.ToString(head.ContentType), b.ct)
		}
	}
	if len(blobs) != 2 {
		t.Errorf("bucket files holds %d objects, want 2", len(blobs))
	}
	refs, err := events.PayloadBinaryRefs(written[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	wantRefs := []events.BinaryRef{{FileID: small.FileID, Size: 5, ContentType: "text/plain"}, {FileID: bare.FileID, Size: 0}}
	if !slices.Equal(refs, wantRefs) {
		t.Errorf("payload references %+v, want %+v", refs, wantRefs)
	}
}

// TestS3ModeFailedStoreLeavesNoMeta: when the resource store cannot be
// written, no meta row appears, so a reader never sees a meta whose
// revision is missing through a failed write.
func TestS3ModeFailedStoreLeavesNoMeta(t *testing.T) {
	ctx := context.Background()
	w, _ := openS3Writer(t, S3Target{Bucket: "no-such-bucket"})
	if err := w.CreateModel(ctx, "doc"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, "doc", "doc:1", doc("x"), Write{}); err == nil {
		t.Fatal("a write into a missing bucket succeeded")
	}
	var n int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM `+ident(w.MetaTable("doc"))).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d meta rows (%v) after a failed resource-store write, want 0", n, err)
	}
}

// TestPutBlobStreams50MiB: a 50 MiB blob read from a stream (never held
// in memory by the test) lands whole under its file_id.
func TestPutBlobStreams50MiB(t *testing.T) {
	ctx := context.Background()
	w, client := openS3Writer(t, S3Target{Bucket: "deploy"})
	const size = 50 << 20
	src := func() io.Reader { return io.LimitReader(&prng{mrand.NewChaCha8([32]byte{7})}, size) }
	h := dedup.NewFileIDHasher()
	if _, err := io.Copy(h, src()); err != nil {
		t.Fatal(err)
	}
	wantID := dedup.HexSum(h)
	b, err := w.PutBlob(ctx, src(), "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	if b.FileID != wantID || b.Size != size || b.Key != "blobs/"+wantID {
		t.Fatalf("PutBlob = %+v, want file_id %s and %d bytes", b, wantID, size)
	}
	obj, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("deploy"), Key: aws.String(b.Key)})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	h.Reset()
	n, err := io.Copy(h, obj.Body)
	if err != nil || n != size || dedup.HexSum(h) != wantID {
		t.Fatalf("stored object: %d bytes hashing to %s (%v), want %d bytes, %s", n, dedup.HexSum(h), err, size, wantID)
	}
	if aws.ToString(obj.ContentType) != "application/octet-stream" {
		t.Errorf("ContentType %q", aws.ToString(obj.ContentType))
	}
}

// prng is a deterministic byte stream.
type prng struct{ c *mrand.ChaCha8 }

func (p *prng) Read(b []byte) (int, error) { return p.c.Read(b) }

// TestS3TargetNeedsClientAndBucket: Open refuses an incomplete target.
func TestS3TargetNeedsClientAndBucket(t *testing.T) {
	for _, tgt := range []S3Target{{Bucket: "b"}, {Client: s3.New(s3.Options{})}} {
		if _, err := Open(context.Background(), pgDSN(), Options{S3: &tgt}); err == nil {
			t.Errorf("Open accepted %+v", tgt)
		}
	}
}
