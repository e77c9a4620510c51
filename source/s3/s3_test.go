package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	s3sink "github.com/specstar/replicator/sink/s3"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
)

// The S3 store tests run a real versitygw (internal/testsupport/s3test) beside the
// shared Postgres, where the test writer (internal/testsupport/specstarpg) keeps the
// metas while it writes revisions to bucket "deploy" and blobs to bucket
// "files" with the AWS SDK; the store is read back through s3sink.Sink.

type s3Env struct {
	srv    *s3test.Server
	client *awss3.Client
	w      *specstarpg.Writer
	store  *s3sink.Sink
}

func newS3Env(t *testing.T) *s3Env {
	t.Helper()
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "deploy")
	srv.CreateBucket(t, "files")
	for _, kv := range srv.Env() { // s3sink.Sink takes credentials from the AWS chain
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	e := &s3Env{srv: srv, client: srv.Client(t)}
	w, err := specstarpg.Open(ctx, pgTestDSN(), specstarpg.Options{TablePrefix: randomPrefix(),
		S3: &specstarpg.S3Target{Client: e.client, Bucket: "deploy", BlobBucket: "files"}})
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgTestDSN(), err)
	}
	t.Cleanup(func() {
		if err := w.DropAll(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		w.Close()
	})
	e.w = w
	store, err := s3sink.Open(ctx, s3sink.Options{Bucket: "deploy", BlobBucket: "files", Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true})
	if err != nil {
		t.Fatalf("open the S3 store at %s: %v", srv.Endpoint, err)
	}
	t.Cleanup(func() { store.Close() })
	e.store = store
	return e
}

func pgTestDSN() string {
	if dsn := os.Getenv("PG_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func randomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t_" + hex.EncodeToString(b[:]) + "_"
}

// The expected content of a deployment the test writer populated, shared
// with the other sources' tests (internal/testsupport/specstarpg).
type (
	resource   = specstarpg.Resource
	deployment = specstarpg.Deployment
)

var (
	payload   = specstarpg.Payload
	withBlobs = specstarpg.WithBlobs
)

func populate(t *testing.T, w *specstarpg.Writer) deployment { return specstarpg.Populate(t, w) }

func msgpackOf(t *testing.T, v interface {
	Encode(events.Encoding) ([]byte, error)
}) []byte {
	t.Helper()
	b, err := v.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withBlobs adds model "report" to d: two resources whose payloads reference
// revKey names a revision by its triple.
func revKey(info *events.RevisionInfo) string {
	return info.RevisionID + "|" + schemaDir(info.SchemaVersion)
}

// schemaDir is the resource store's p_schema_version: "v_{sv}" or "no_ver".
func schemaDir(sv events.Opt[string]) string {
	if sv.IsSet() {
		return "v_" + sv.Value
	}
	return "no_ver"
}

// TestSnapshotS3: Snapshot of the S3 store alone yields every revision of every model
// and every blob once, each blob under the first model referencing it (an
// unreferenced one under the first model, and counted).
func TestSnapshot(t *testing.T) {
	ctx := context.Background()
	e := newS3Env(t)
	want := populate(t, e.w)
	blobs := withBlobs(t, e.w, want)
	orphan, err := e.w.PutBlobBytes(ctx, []byte("nobody references me"), "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	blobs[orphan.FileID] = []byte("nobody references me")

	revs := map[string]map[string][]byte{} // model -> triple -> record bytes
	blobModel := map[string]string{}
	var progressed int
	st, err := Snapshot(ctx, e.store, e.store, nil, Handler{
		Record: func(model string, rec events.Record) error {
			rr := rec.(*events.RevisionRecord)
			res, err := rr.Resource()
			if err != nil {
				return err
			}
			if revs[model] == nil {
				revs[model] = map[string][]byte{}
			}
			if _, dup := revs[model][revKey(&res.Info)]; dup {
				t.Errorf("%s revision %s emitted twice", model, revKey(&res.Info))
			}
			revs[model][revKey(&res.Info)] = rr.Data
			return nil
		},
		Blob: func(ctx context.Context, model string, b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error {
			r, err := open(ctx)
			if err != nil {
				return err
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, blobs[b.FileID.Value]) {
				t.Errorf("blob %s: bytes differ", b.FileID.Value)
			}
			blobModel[b.FileID.Value] = model
			return nil
		},
		Progress: func(Stats) { progressed++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(st.Models) != "[issue report user]" || st.Revisions != 21 || st.Blobs != 4 || st.UnreferencedBlobs != 1 || progressed != 25 {
		t.Errorf("stats %+v (progress called %d times)", st, progressed)
	}
	for m, rs := range want {
		n := 0
		for _, r := range rs {
			for _, rev := range r.Revs {
				n++
				b, ok := revs[m][revKey(rev.Info)]
				if !ok || !bytes.Equal(b, msgpackOf(t, &events.RawResource{Info: *rev.Info, RawData: rev.Data})) {
					t.Errorf("%s revision %s: missing or different", m, revKey(rev.Info))
				}
			}
		}
		if len(revs[m]) != n {
			t.Errorf("model %s: %d revisions emitted, want %d", m, len(revs[m]), n)
		}
	}
	for id := range blobs {
		want := "report" // the only model referencing blobs
		if id == orphan.FileID {
			want = "issue" // the first model
		}
		if blobModel[id] != want {
			t.Errorf("blob %s published under model %q, want %s", id, blobModel[id], want)
		}
	}
}
