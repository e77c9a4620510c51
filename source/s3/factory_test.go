package s3

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source/internal/base"
)

// factoryURL starts a versitygw with one bucket and gives the factory URL
// below prefix "app/" in it; the credentials go to the AWS chain.
func factoryURL(t *testing.T) (*s3test.Server, string) {
	t.Helper()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "factory")
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return srv, "s3://factory/app/?factory=s3&path_style=true&endpoint=" + url.QueryEscape(srv.Endpoint)
}

// archiveRecords are an archive's Meta, Revision and Blob records keyed by
// model and exact payload, and the models in order.
func archiveRecords(t *testing.T, name string) (map[string]bool, []*acbak.Frame) {
	t.Helper()
	data := testfixtures.Read(t, name)
	set := map[string]bool{}
	var frames []*acbak.Frame
	model := ""
	for fr, err := range acbak.NewReader(bytes.NewReader(data), acbak.Options{Size: int64(len(data))}).All() {
		if err != nil {
			t.Fatal(err)
		}
		switch r := fr.Record.(type) {
		case *events.ModelStartRecord:
			model = r.ModelName
		case *events.MetaRecord, *events.RevisionRecord, *events.BlobRecord:
			set[model+"\x00"+string(fr.Payload)] = true
			frames = append(frames, fr)
		}
	}
	return set, frames
}

// fill applies an archive to the factory through the sink, as a
// replicator would.
func fill(t *testing.T, raw, name string) { t.Helper(); fillOnly(t, raw, name, nil) }

// fillOnly is fill for the records keep accepts (all when nil).
func fillOnly(t *testing.T, raw, name string, keep func(events.Record) bool) {
	t.Helper()
	ctx := context.Background()
	snk, err := sink.Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	data := testfixtures.Read(t, name)
	model := ""
	for fr, err := range acbak.NewReader(bytes.NewReader(data), acbak.Options{Size: int64(len(data))}).All() {
		if err != nil {
			t.Fatal(err)
		}
		if _, isModel := fr.Record.(*events.ModelStartRecord); !isModel && keep != nil && !keep(fr.Record) {
			continue
		}
		switch r := fr.Record.(type) {
		case *events.ModelStartRecord:
			model = r.ModelName
		case *events.MetaRecord:
			m, err := r.Meta()
			if err == nil {
				_, err = snk.ApplyMeta(ctx, model, m)
			}
			if err != nil {
				t.Fatal(err)
			}
		case *events.RevisionRecord:
			res, err := r.Resource()
			if err == nil {
				_, err = snk.ApplyRevision(ctx, model, res)
			}
			if err != nil {
				t.Fatal(err)
			}
		case *events.BlobRecord:
			if _, err := snk.ApplyBlob(ctx, r.FileID, r.Size, r.ContentType, bytes.NewReader(r.BlobData)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := snk.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func recordKey(t *testing.T, r base.Record) string {
	t.Helper()
	b, err := r.Record.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	return r.Model + "\x00" + string(b)
}

// TestFactorySource: what the factory sink wrote from an archive reads
// back through the factory source as exactly the archive's records, each
// meta followed by its own resource's revisions.
func TestFactorySource(t *testing.T) {
	_, raw := factoryURL(t)
	for _, name := range []string{"small.acbak", "blobs.acbak"} {
		fill(t, raw, name)
	}
	want := map[string]bool{}
	for _, name := range []string{"small.acbak", "blobs.acbak"} {
		set, _ := archiveRecords(t, name)
		for k := range set {
			want[k] = true
		}
	}
	got := map[string]bool{}
	current := ""
	for r, err := range (&Factory{URL: raw}).Records(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		switch rec := r.Record.(type) {
		case *events.MetaRecord:
			m, err := rec.Meta()
			if err != nil {
				t.Fatal(err)
			}
			current = m.ResourceID
		case *events.RevisionRecord:
			res, err := rec.Resource()
			if err != nil {
				t.Fatal(err)
			}
			if res.Info.ResourceID != current {
				t.Errorf("revision %s follows the meta of %s", res.Info.RevisionID, current)
			}
		case *events.BlobRefRecord:
			t.Errorf("blob %s reads as missing", rec.FileID)
		}
		got[recordKey(t, r)] = true
	}
	if len(want) == 0 || len(got) != len(want) {
		t.Errorf("read %d distinct records, the archives hold %d", len(got), len(want))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("a record of the archives is missing (%.60q)", k)
		}
	}
}

// TestFactorySourceRefusesBrokenMetaDB: a meta.db that is not a SQLite
// file is an error naming the object, not a panic or an empty model.
func TestFactorySourceRefusesBrokenMetaDB(t *testing.T) {
	srv, raw := factoryURL(t)
	_, err := srv.Client(t).PutObject(context.Background(), &awss3.PutObjectInput{Bucket: aws.String("factory"), Key: aws.String("app/issue/meta.db"),
		Body: strings.NewReader("this is not a database, and it is long enough to look like a header or more")})
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for _, err := range (&Factory{URL: raw}).Records(context.Background()) {
		if err != nil {
			last = err
		}
	}
	if last == nil || !strings.Contains(last.Error(), "app/issue/meta.db") {
		t.Fatalf("got %v, want an error naming app/issue/meta.db", last)
	}
}
