package s3

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
)

// TestUntypedBlobReadsAsSpecStarReadsIt (issue 12, item 22): a blob
// SpecStar stored in S3 without a content type is read back by SpecStar
// (and put in its own dump) with the type S3 answers, but the S3 source
// reported "" (the payload reference's), the one byte difference between
// our mirror and SpecStar's dump. Now it reports the type S3 answers, and
// only a blob our S3 sink stored with "" (x-amz-meta-specstar-no-content-type)
// reads back as "".
func TestUntypedBlobReadsAsSpecStarReadsIt(t *testing.T) {
	ctx := context.Background()
	e := newS3Env(t)
	if err := e.w.CreateModel(ctx, "doc"); err != nil {
		t.Fatal(err)
	}
	// As SpecStar stores it: a raw PUT with no ContentType.
	theirs, err := e.w.PutBlobBytes(ctx, []byte("stored by SpecStar, no type"), "")
	if err != nil {
		t.Fatal(err)
	}
	head, err := e.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String("files"), Key: aws.String(theirs.Key)})
	if err != nil {
		t.Fatal(err)
	}
	served := aws.ToString(head.ContentType)
	if served == "" {
		t.Fatalf("the S3 server answers no Content-Type for %s: nothing to test", theirs.Key)
	}
	// As our S3 sink stores a blob whose type is "".
	data := []byte("stored by our sink, type empty")
	ours := specstarpg.Blob{FileID: dedup.FileID(data), Size: int64(len(data))}
	if _, err := e.store.ApplyBlob(ctx, ours.FileID, ours.Size, "", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	payload := events.Struct{Declared: 2, Fields: []events.StructField{{Name: "title", Value: "t"}, {Name: "files", Value: []any{theirs.Value(), ours.Value()}}}}
	if _, err := e.w.Create(ctx, "doc", "doc:1", payload, specstarpg.Write{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{theirs.FileID: served, ours.FileID: ""}

	got := map[string]string{}
	if _, err := Snapshot(ctx, e.store, e.store, nil, Handler{
		Record: func(string, events.Record) error { return nil },
		Blob: func(_ context.Context, _ string, b *events.Binary, _ func(context.Context) (io.ReadCloser, error)) error {
			got[b.FileID.Value] = b.ContentType.Value
			return nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	for id, ct := range want {
		if g, ok := got[id]; !ok || g != ct {
			t.Errorf("Snapshot: blob %s has content type %q (found %v), want %q", id, g, ok, ct)
		}
	}

	q := "?endpoint=" + url.QueryEscape(e.srv.Endpoint) + "&region=" + e.srv.Region + "&path_style=true"
	src := &Source{Resources: "s3://deploy" + q, Blobs: "s3://files" + q}
	got = map[string]string{}
	for rec, err := range src.Records(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ref, ok := rec.Record.(*events.BlobRefRecord); ok {
			got[ref.FileID] = ref.ContentType
		}
	}
	for id, ct := range want {
		if g, ok := got[id]; !ok || g != ct {
			t.Errorf("Source: blob %s has content type %q (found %v), want %q", id, g, ok, ct)
		}
	}
}
