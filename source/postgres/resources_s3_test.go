package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	s3sink "github.com/specstar/replicator/sink/s3"
)

// The Postgres+S3 tests run a real versitygw (internal/testsupport/s3test) beside the
// shared Postgres: metas in Postgres, revisions in bucket "deploy", blobs
// in bucket "files", written by the test writer with the AWS SDK; read
// back through s3sink.Sink.

type s3Env struct {
	srv    *s3test.Server
	client *s3.Client
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

// source opens the Postgres source reading revisions from the S3 store.
func (e *s3Env) source(t *testing.T, wait time.Duration) *Source {
	t.Helper()
	return openSource(t, prefixOf(e.w), Options{RevisionsFrom: e.store, RevisionsWait: wait, Resources: "s3://deploy"})
}

// withBlobs adds model "report" to d: two resources whose payloads reference
// revKey names a revision by its triple.
func revKey(info *events.RevisionInfo) string {
	return info.RevisionID + "|" + versionDir(info.SchemaVersion)
}

// checkListed checks that recs are, per model and in resource_id order,
// each resource's meta then exactly its revisions (in any order: the
// store lists them in key order), with the bytes the writer wrote.
func checkListed(t *testing.T, recs []emitted, want deployment) {
	t.Helper()
	var models []string
	for m := range want {
		models = append(models, m)
	}
	sort.Strings(models)
	i := 0
	next := func(what string) emitted {
		t.Helper()
		if i >= len(recs) {
			t.Fatalf("the records ended before %s", what)
		}
		i++
		return recs[i-1]
	}
	for _, m := range models {
		var rids []string
		for rid := range want[m] {
			rids = append(rids, rid)
		}
		sort.Strings(rids)
		for _, rid := range rids {
			r := want[m][rid]
			rec := next("the meta of " + rid)
			mr, ok := rec.rec.(*events.MetaRecord)
			if !ok || rec.model != m {
				t.Fatalf("record %d: %s of %q, want the meta of %s %s", i-1, rec.rec.Tag(), rec.model, m, rid)
			}
			if !bytes.Equal(mr.Data, r.Last.MetaData) {
				t.Errorf("%s %s: meta bytes differ from what the writer wrote", m, rid)
			}
			left := map[string]*specstarpg.Written{}
			for _, rev := range r.Revs {
				left[revKey(rev.Info)] = rev
			}
			for range r.Revs {
				rec := next(fmt.Sprintf("the revisions of %s", rid))
				rr, ok := rec.rec.(*events.RevisionRecord)
				if !ok {
					t.Fatalf("record %d: %s, want a revision of %s", i-1, rec.rec.Tag(), rid)
				}
				res, err := rr.Resource()
				if err != nil {
					t.Fatal(err)
				}
				rev := left[revKey(&res.Info)]
				if rev == nil {
					t.Fatalf("record %d: revision %s of %s emitted twice or not written", i-1, revKey(&res.Info), rid)
				}
				delete(left, revKey(&res.Info))
				if !bytes.Equal(msgpackOf(t, &res.Info), rev.InfoData) || !bytes.Equal(res.RawData, rev.Data) {
					t.Errorf("%s revision %s differs from what the writer wrote", rid, rev.Info.RevisionID)
				}
				if !bytes.Equal(rr.Data, msgpackOf(t, &events.RawResource{Info: *rev.Info, RawData: rev.Data})) {
					t.Errorf("%s revision %s: the record is not the msgpack RawResource", rid, rev.Info.RevisionID)
				}
			}
			if got := recs[i-1].pos; got.Model != m || got.ResourceID != rid {
				t.Errorf("position after %s %s is %+v", m, rid, got)
			}
		}
	}
	if i != len(recs) {
		t.Errorf("%d records emitted, want %d", len(recs), i)
	}
}

// TestPostgresS3Snapshot: a Postgres+S3 deployment written as SpecStar
// writes it snapshots as each meta followed by all its revisions, bytes
// equal to what was written; the blobs the payloads reference open from
// S3 with their bytes and content types.
func TestPostgresS3Snapshot(t *testing.T) {
	ctx := context.Background()
	e := newS3Env(t)
	want := populate(t, e.w)
	blobs := withBlobs(t, e.w, want)
	src := e.source(t, 0)
	recs, st := snapshotAll(t, src, Position{})
	checkListed(t, recs, want)
	if st.Metas != 9 || st.Revisions != 12+6+3 {
		t.Errorf("stats: %d metas, %d revisions; want 9, 21", st.Metas, st.Revisions)
	}
	opened := 0
	for _, rec := range recs {
		rr, ok := rec.rec.(*events.RevisionRecord)
		if !ok {
			continue
		}
		res, _ := rr.Resource()
		refs, err := events.PayloadBinaryRefs(res.RawData)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range refs {
			bin, r, err := e.store.OpenBlob(ctx, ref.FileID)
			if err != nil {
				t.Fatalf("blob %s referenced by %s: %v", ref.FileID, res.Info.RevisionID, err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, blobs[ref.FileID]) || bin.Size.Value != int64(len(got)) || ref.ContentType != "" && bin.ContentType.Value != ref.ContentType {
				t.Errorf("blob %s: %d bytes (%v), %+v; want %d bytes, content type %q", ref.FileID, len(got), err, bin, len(blobs[ref.FileID]), ref.ContentType)
			}
			opened++
		}
	}
	if opened != 4 {
		t.Errorf("opened %d referenced blobs, want 4", opened)
	}
}

// TestPostgresS3CurrentRevisionMissing: a meta whose current revision the
// store does not list is waited for (a lagging listing) and then reported
// by resource and key; when the object shows up within the wait the
// snapshot completes, with no revision emitted twice.
func TestPostgresS3CurrentRevisionMissing(t *testing.T) {
	ctx := context.Background()
	e := newS3Env(t)
	d := deployment{}
	if err := e.w.CreateModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func() (*specstarpg.Written, error){
		func() (*specstarpg.Written, error) {
			return e.w.Create(ctx, "issue", "issue:1", payload("a", 1), specstarpg.Write{})
		},
		func() (*specstarpg.Written, error) {
			return e.w.Update(ctx, "issue", "issue:1", payload("a", 2), specstarpg.Write{})
		},
	} {
		wr, err := f()
		if err != nil {
			t.Fatal(err)
		}
		d.Add(wr)
	}
	cur := d["issue"]["issue:1"].Last
	key := cur.Keys[2] // the index object of the current revision
	if !strings.HasSuffix(key, "resources/resource/issue:1/issue:1:2/no_ver/uid") {
		t.Fatalf("index key %q", key)
	}
	if _, err := e.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("deploy"), Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err := e.source(t, 400*time.Millisecond).Snapshot(ctx, Position{}, func(string, events.Record, Position) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `"issue:1"`) || !strings.Contains(err.Error(), "resources/resource/issue:1/issue:1:2/no_ver/uid") {
		t.Fatalf("snapshot with the current revision missing: %v; want an error naming the resource and the key", err)
	}
	if time.Since(start) < 400*time.Millisecond {
		t.Errorf("gave up after %s, before the 400ms wait", time.Since(start))
	}

	// The object appears while the source waits for it.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = e.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("deploy"), Key: aws.String(key), Body: strings.NewReader(cur.Info.UID)})
	}()
	recs, _ := snapshotAll(t, e.source(t, waitfor.Scaled(10*time.Second)), Position{})
	checkListed(t, recs, d)
}

// TestPostgresS3Poll: polling a Postgres+S3 deployment emits each changed
// meta with all its revisions read from S3.
func TestPostgresS3Poll(t *testing.T) {
	ctx := context.Background()
	e := newS3Env(t)
	d := populate(t, e.w)
	src := e.source(t, 0)
	_, st := snapshotAll(t, src, Position{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	recs := make(chan emitted, 100)
	go func() {
		done <- src.Poll(ctx, st.Cursor, PollOptions{Interval: 50 * time.Millisecond}, func(model string, rec events.Record, _ Cursor) error {
			recs <- emitted{model: model, rec: rec}
			return nil
		})
	}()
	// wait collects n records from Poll.
	wait := func(n int) []emitted {
		t.Helper()
		var got []emitted
		for len(got) < n {
			select {
			case r := <-recs:
				got = append(got, r)
			case <-waitfor.After(10 * time.Second): // a deadline per record, scaled by the load
				t.Fatalf("Poll emitted %d records, then nothing for %s; want %d", len(got), waitfor.Scaled(10*time.Second), n)
			}
		}
		select {
		case r := <-recs:
			t.Fatalf("Poll emitted more than %d records: %v", n, r.rec.Tag())
		case <-time.After(300 * time.Millisecond):
		}
		return got
	}
	revisionIDs := func(got []emitted) []string {
		var ids []string
		for _, g := range got {
			if rr, ok := g.rec.(*events.RevisionRecord); ok {
				res, err := rr.Resource()
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, res.Info.RevisionID)
			}
		}
		return ids
	}

	// The snapshot emitted issue:002's revisions: a change publishes the
	// meta and only the revision the snapshot did not hold.
	old := len(d["issue"]["issue:002"].Revs)
	wr, err := e.w.Update(ctx, "issue", "issue:002", payload("polled", 9), specstarpg.Write{})
	if err != nil {
		t.Fatal(err)
	}
	d.Add(wr)
	got := wait(2)
	if ids := revisionIDs(got); len(ids) != 1 || ids[0] != wr.Info.RevisionID {
		t.Fatalf("after a change, Poll emitted revisions %v, want only the new %s (of %d)", ids, wr.Info.RevisionID, old+1)
	}
	if _, ok := got[0].rec.(*events.MetaRecord); !ok {
		t.Fatalf("first record %s, want the meta", got[0].rec.Tag())
	}

	// Starting over (a tail's restart) forgets that: every revision again,
	// byte for byte what was written.
	src.ForgetEmitted()
	wr, err = e.w.Update(ctx, "issue", "issue:002", payload("polled again", 10), specstarpg.Write{})
	if err != nil {
		t.Fatal(err)
	}
	d.Add(wr)
	changed := deployment{"issue": {"issue:002": d["issue"]["issue:002"]}}
	got = wait(1 + len(changed["issue"]["issue:002"].Revs))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll ended with %v", err)
	}
	for i := range got {
		got[i].pos = Position{Model: "issue", ResourceID: "issue:002"} // Poll reports a cursor, not a position
	}
	checkListed(t, got, changed)
}
