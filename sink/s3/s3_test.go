package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// s3Env is one throwaway S3 server with a fault proxy in front; sinks talk
// through the proxy so tests can count and fail requests.
type s3Env struct {
	srv   *s3test.Server
	proxy *s3test.FaultProxy
	raw   *s3.Client // straight to the server, for checks
}

// record is one decoded record of a fixture archive.
type record = sinktestutil.Record

func newS3Env(t *testing.T) *s3Env {
	t.Helper()
	srv := s3test.Start(t)
	return &s3Env{srv: srv, proxy: s3test.NewFaultProxy(t, srv.Endpoint), raw: srv.Client(t)}
}

// open opens a sink on bucket (created if needed) through the proxy.
func (e *s3Env) open(t *testing.T, bucket string, opts Options) *Sink {
	t.Helper()
	if _, err := e.raw.HeadBucket(context.Background(), &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err != nil {
		e.srv.CreateBucket(t, bucket)
	}
	opts.Bucket = bucket
	opts.Endpoint = e.proxy.URL
	opts.PathStyle = true
	opts.Region = e.srv.Region
	if opts.maxBackoff == 0 {
		opts.maxBackoff = 20 * time.Millisecond
	}
	s, err := openS3(context.Background(), opts, config.WithCredentialsProvider(e.srv.Credentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// keys lists every key of a bucket, straight from the server.
func (e *s3Env) keys(t *testing.T, bucket string) []string {
	t.Helper()
	var keys []string
	p := s3.NewListObjectsV2Paginator(e.raw, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			if isOwnState(aws.ToString(o.Key)) {
				continue
			}
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// isOwnState says key is one of the replicator's own objects (marks and
// leases below .specstar-replicator/), not SpecStar's data: the dumps
// compare data only.
func isOwnState(key string) bool { return strings.Contains(key, markDir) }

// get reads an object straight from the server; nil if absent.
func (e *s3Env) get(t *testing.T, bucket, key string) []byte {
	t.Helper()
	b, err := e.getErr(bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// getErr is get for other goroutines than the test's.
func (e *s3Env) getErr(bucket, key string) ([]byte, error) {
	out, err := e.raw.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if isNoSuchKey(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return b, nil
}

func (e *s3Env) head(t *testing.T, bucket, key string) *s3.HeadObjectOutput {
	t.Helper()
	out, err := e.raw.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if isNoSuchKey(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// applyS3 applies records 16 at a time, as the replicator does, and
// returns the outcomes in record order.
func applyS3(t *testing.T, s *Sink, recs []record) []store.Outcome {
	t.Helper()
	ctx := context.Background()
	outs := make([]store.Outcome, len(recs))
	errs := make([]error, len(recs))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, r := range recs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			switch {
			case r.Meta != nil:
				outs[i], errs[i] = s.ApplyMeta(ctx, r.Model, r.Meta)
			case r.Rev != nil:
				outs[i], errs[i] = s.ApplyRevision(ctx, r.Model, r.Rev)
			default:
				b := r.Blob
				outs[i], errs[i] = s.ApplyBlob(ctx, b.FileID, b.Size, b.ContentType, bytes.NewReader(b.BlobData))
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("apply record %d (%s): %v", i, recs[i].Model, err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return outs
}

func goldenRecords(t *testing.T, name string) []record {
	t.Helper()
	return sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, name+".acbak"))
}

// verifyS3 checks the bucket against the archive's records, through the
// read side and through raw keys: every revision and blob, and not one key
// more. Records are checked 16 at a time.
func verifyS3(t *testing.T, e *s3Env, s *Sink, bucket string, recs []record) {
	t.Helper()
	ctx := context.Background()
	enc := s.encoding()
	var (
		mu   sync.Mutex
		want = map[string]bool{}
	)
	expect := func(keys ...string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			want[k] = true
		}
	}
	check := func(r record) error {
		switch {
		case r.Rev != nil:
			info := &r.Rev.Info
			wantInfo, err := info.Encode(enc)
			if err != nil {
				return err
			}
			got, data, err := s.Revision(ctx, r.Model, info.ResourceID, info.RevisionID, info.SchemaVersion)
			if err != nil {
				return fmt.Errorf("Revision %s %s: %w", r.Model, info.RevisionID, err)
			}
			gotInfo, _ := got.Encode(enc)
			if !bytes.Equal(gotInfo, wantInfo) || !bytes.Equal(data, r.Rev.RawData) {
				return fmt.Errorf("Revision %s %s: read back differs from the archive", r.Model, info.RevisionID)
			}
			prefix := r.Model + "/data/resources/"
			storeInfo := prefix + "store/" + info.UID + "/info"
			storeData := prefix + "store/" + info.UID + "/data"
			index := prefix + "resource/" + info.ResourceID + "/" + info.RevisionID + "/" + store.SchemaDir(info.SchemaVersion) + "/uid"
			expect(storeInfo, storeData, index)
			for _, c := range []struct {
				key  string
				want []byte
			}{{storeInfo, wantInfo}, {storeData, r.Rev.RawData}, {index, []byte(info.UID)}} {
				b, err := e.getErr(bucket, c.key)
				if err != nil {
					return err
				}
				if !bytes.Equal(b, c.want) {
					return fmt.Errorf("%s holds %d bytes %.60q, want %d bytes %.60q", c.key, len(b), b, len(c.want), c.want)
				}
			}
		case r.Blob != nil:
			b := r.Blob
			key := "blobs/" + b.FileID
			expect(key)
			h, err := e.raw.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
			if err != nil {
				return fmt.Errorf("head %s: %w", key, err)
			}
			if b.ContentType != "" && aws.ToString(h.ContentType) != b.ContentType {
				return fmt.Errorf("%s: Content-Type %q, want %q", key, aws.ToString(h.ContentType), b.ContentType)
			}
			bin, body, err := s.OpenBlob(ctx, b.FileID)
			if err != nil {
				return err
			}
			got, err := io.ReadAll(body)
			body.Close()
			if err != nil {
				return err
			}
			if !bytes.Equal(got, b.BlobData) || bin.Size.Value != b.Size || bin.FileID.Value != b.FileID {
				return fmt.Errorf("blob %s: read back %d bytes (size %d), want %d", b.FileID, len(got), bin.Size.Value, b.Size)
			}
			if b.ContentType != "" && bin.ContentType.Value != b.ContentType {
				return fmt.Errorf("blob %s: content type %q, want %q", b.FileID, bin.ContentType.Value, b.ContentType)
			}
		}
		return nil
	}
	errs := make([]error, len(recs))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, r := range recs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = check(r)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got := e.keys(t, bucket)
	var wantKeys []string
	for k := range want {
		wantKeys = append(wantKeys, k)
	}
	sort.Strings(wantKeys)
	if !slices.Equal(got, wantKeys) {
		t.Errorf("bucket holds %d keys, want %d:\n got %q\nwant %q", len(got), len(wantKeys), first(got, 20), first(wantKeys, 20))
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func countOutcomes(outs []store.Outcome) map[store.Outcome]int {
	m := map[store.Outcome]int{}
	for _, o := range outs {
		m[o]++
	}
	return m
}

func TestS3GoldenReplay(t *testing.T) {
	e := newS3Env(t)
	for _, name := range []string{"small", "medium", "blobs", "msgpack"} {
		t.Run(name, func(t *testing.T) {
			bucket := "golden-" + name
			s := e.open(t, bucket, Options{})
			recs := goldenRecords(t, name)
			outs := applyS3(t, s, recs)
			for i, r := range recs {
				if r.Meta != nil && outs[i] != store.Skipped {
					t.Fatalf("ApplyMeta = %v, want skipped", outs[i])
				}
			}
			verifyS3(t, e, s, bucket, recs)

			// A replay writes no data: no PUT, no POST (multipart), no DELETE
			// (the writer lease it renews meanwhile aside).
			puts, posts, dels := e.proxy.CountData("PUT"), e.proxy.CountData("POST"), e.proxy.CountData("DELETE")
			again := applyS3(t, s, recs)
			for i, r := range recs {
				if r.Meta == nil && again[i] != store.Unchanged {
					t.Fatalf("replay of record %d (%s): %v, want unchanged", i, r.Model, again[i])
				}
			}
			if d := e.proxy.CountData("PUT") - puts; d != 0 {
				t.Errorf("replay sent %d PUTs, want 0", d)
			}
			if d := e.proxy.CountData("POST") + e.proxy.CountData("DELETE") - posts - dels; d != 0 {
				t.Errorf("replay sent %d POST/DELETE requests, want 0", d)
			}
		})
	}
}

func TestS3JSONEncodingAndSeparateBlobBucket(t *testing.T) {
	e := newS3Env(t)
	e.srv.CreateBucket(t, "the-blobs")
	s := e.open(t, "res-json", Options{Encoding: events.Some(events.JSON), BlobBucket: "the-blobs", BlobPrefix: "b/"})
	recs := goldenRecords(t, "blobs")
	applyS3(t, s, recs)
	nblobs := 0
	for _, r := range recs {
		switch {
		case r.Rev != nil:
			info := &r.Rev.Info
			want, _ := info.Encode(events.JSON)
			got := e.get(t, "res-json", r.Model+"/data/resources/store/"+info.UID+"/info")
			if !bytes.Equal(got, want) {
				t.Errorf("info of %s = %q, want %q", info.UID, got, want)
			}
		case r.Blob != nil:
			nblobs++
			if got := e.get(t, "the-blobs", "b/"+r.Blob.FileID); !bytes.Equal(got, r.Blob.BlobData) {
				t.Errorf("blob %s not in the blob bucket", r.Blob.FileID)
			}
		}
	}
	if nblobs == 0 {
		t.Fatal("blobs.acbak has no blobs")
	}
	for _, k := range e.keys(t, "res-json") {
		if strings.HasPrefix(k, "b/") || strings.HasPrefix(k, "blobs/") {
			t.Errorf("blob %s written to the resource bucket", k)
		}
	}
}

func TestS3Golden503s(t *testing.T) {
	e := newS3Env(t)
	e.proxy.Fail503(0.3)
	for _, name := range []string{"small", "blobs", "msgpack", "medium"} {
		t.Run(name, func(t *testing.T) {
			bucket := "flaky-" + name
			// 0.3^20: no request of thousands fails 20 times in a row.
			s := e.open(t, bucket, Options{MaxAttempts: 20})
			before := e.proxy.Injected()
			recs := goldenRecords(t, name)
			if len(recs) > 400 {
				recs = recs[:400] // medium's first 36 resources: plenty of retries, a test under 20 s
			}
			applyS3(t, s, recs)
			if e.proxy.Injected() == before {
				t.Fatal("no 503 injected")
			}
			verifyS3(t, e, s, bucket, recs)
		})
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestS3Blobs(t *testing.T) {
	e := newS3Env(t)
	const bucket = "blob-sizes"
	s := e.open(t, bucket, Options{PartSize: 5 << 20})
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		size        int
		contentType string
	}{
		{"empty", 0, ""},
		{"one byte", 1, "text/plain"},
		{"exactly one part", 5 << 20, "application/octet-stream"},
		{"multipart", 20 << 20, "video/mp4"},
		{"multipart with a short last part", 11<<20 + 7, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(t, tc.size)
			id := dedup.FileID(data)
			out, err := s.ApplyBlob(ctx, id, int64(len(data)), tc.contentType, bytes.NewReader(data))
			if err != nil || out != store.Written {
				t.Fatalf("ApplyBlob = %v, %v; want written", out, err)
			}
			bin, body, err := s.OpenBlob(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(body)
			body.Close()
			if !bytes.Equal(got, data) || bin.Size.Value != int64(tc.size) {
				t.Fatalf("read back %d bytes, want %d", len(got), tc.size)
			}
			// "" (SpecStar's unknown type) must read back as "", though S3
			// gives the object a default type.
			if bin.ContentType.Value != tc.contentType {
				t.Fatalf("content type %q, want %q", bin.ContentType.Value, tc.contentType)
			}
			// Present: Unchanged, and the data is not even read.
			out, err = s.ApplyBlob(ctx, id, int64(len(data)), tc.contentType, failReader{t})
			if err != nil || out != store.Unchanged {
				t.Fatalf("second ApplyBlob = %v, %v; want unchanged", out, err)
			}
		})
	}
}

// failReader fails the test when read.
type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Error("data read although the blob is present")
	return 0, io.EOF
}

func TestS3BlobRejected(t *testing.T) {
	e := newS3Env(t)
	const bucket = "blob-bad"
	s := e.open(t, bucket, Options{PartSize: 5 << 20})
	ctx := context.Background()
	small, big := randomBytes(t, 1000), randomBytes(t, 12<<20)
	otherID := dedup.FileID([]byte("something else"))
	for _, tc := range []struct {
		name   string
		fileID string
		size   int64
		data   []byte
	}{
		{"small, wrong hash", otherID, 1000, small},
		{"multipart, wrong hash", otherID, int64(len(big)), big},
		{"small, shorter than declared", dedup.FileID(small), 1001, small},
		{"small, longer than declared", dedup.FileID(small), 999, small},
		{"multipart, shorter than declared", dedup.FileID(big), int64(len(big)) + 1, big},
		{"multipart, longer than declared", dedup.FileID(big), int64(len(big)) - 1, big},
		{"not a file_id", "../x", 1000, small},
		{"negative size", dedup.FileID(small), -1, small},
		{"more parts than S3 allows", dedup.FileID(small), 10000*(5<<20) + 1, small},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ApplyBlob(ctx, tc.fileID, tc.size, "", bytes.NewReader(tc.data))
			if !store.IsInvalid(err) {
				t.Fatalf("ApplyBlob: %v, want an InvalidError", err)
			}
			if h := e.head(t, bucket, "blobs/"+tc.fileID); h != nil {
				t.Fatalf("an object was left at blobs/%s", tc.fileID)
			}
		})
	}
	if keys := e.keys(t, bucket); len(keys) != 0 {
		t.Fatalf("bucket holds %q, want nothing", keys)
	}
	ups, err := e.raw.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left open", len(ups.Uploads))
	}
}

func TestS3BigBlobThrough503s(t *testing.T) {
	e := newS3Env(t)
	e.proxy.Fail503(0.5)
	s := e.open(t, "blob-flaky", Options{PartSize: 5 << 20})
	data := randomBytes(t, 20<<20)
	id := dedup.FileID(data)
	if out, err := s.ApplyBlob(context.Background(), id, int64(len(data)), "x/y", bytes.NewReader(data)); err != nil || out != store.Written {
		t.Fatalf("ApplyBlob = %v, %v", out, err)
	}
	if got := e.get(t, "blob-flaky", "blobs/"+id); !bytes.Equal(got, data) {
		t.Fatal("blob differs after retries")
	}
	if e.proxy.Injected() == 0 {
		t.Fatal("no 503 injected")
	}
}

// rev builds a revision for the ordering scenarios.
func rev(uid, rid string, n int, sv, parentSV string, updated int, payload string) *events.RawResource {
	at := func(s int) events.Time {
		return events.Time{Time: time.Date(2025, 1, 1, 0, 0, s, 0, time.UTC)}
	}
	info := events.RevisionInfo{
		UID: uid, ResourceID: rid, RevisionID: fmt.Sprintf("%s:%d", rid, n),
		ParentRevisionID: events.Null[string](),
		SchemaVersion:    events.Null[string](),
		DataHash:         events.Some(dedup.DataHash([]byte(payload))),
		Status:           "stable",
		CreatedTime:      at(0), UpdatedTime: at(updated),
		CreatedBy: "a", UpdatedBy: "b",
	}
	if sv != "" {
		info.SchemaVersion = events.Some(sv)
	}
	if parentSV != "" {
		info.ParentSchemaVersion = events.Some(parentSV)
	}
	return &events.RawResource{Info: info, RawData: []byte(payload)}
}

// TestS3MirrorsDiskRules applies the same sequences to a disk sink and to
// S3 and expects the same outcomes and the same revisions read back.
func TestS3MirrorsDiskRules(t *testing.T) {
	const (
		u1 = "11111111-1111-4111-8111-111111111111"
		u2 = "22222222-2222-4222-8222-222222222222"
	)
	e := newS3Env(t)
	ctx := context.Background()
	for i, tc := range []struct {
		name string
		seq  []*events.RawResource
	}{
		{"replay", []*events.RawResource{rev(u1, "r", 1, "", "", 1, `{"a":1}`), rev(u1, "r", 1, "", "", 1, `{"a":1}`)}},
		{"migration in order", []*events.RawResource{rev(u1, "r", 1, "v1", "", 1, `{"a":1}`), rev(u1, "r", 1, "v2", "v1", 2, `{"a":2}`)}},
		{"migration first", []*events.RawResource{rev(u1, "r", 1, "v2", "v1", 2, `{"a":2}`), rev(u1, "r", 1, "v1", "", 1, `{"a":1}`)}},
		{"draft modified, in order", []*events.RawResource{rev(u1, "r", 1, "", "", 1, `{"a":1}`), rev(u2, "r", 1, "", "", 2, `{"a":2}`)}},
		{"draft modified, reversed", []*events.RawResource{rev(u2, "r", 1, "", "", 2, `{"a":2}`), rev(u1, "r", 1, "", "", 1, `{"a":1}`)}},
		{"same uid rewritten later", []*events.RawResource{rev(u1, "r", 1, "", "", 1, `{"a":1}`), rev(u1, "r", 1, "", "", 3, `{"a":3}`), rev(u1, "r", 1, "", "", 2, `{"a":2}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openDisk(t, t.TempDir(), disk.Options{Encoding: events.Msgpack})
			s := e.open(t, fmt.Sprintf("rules-%d", i), Options{})
			for j, r := range tc.seq {
				want, err := d.ApplyRevision(ctx, "m", r)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.ApplyRevision(ctx, "m", r)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("step %d: S3 %v, disk %v", j, got, want)
				}
			}
			for _, r := range tc.seq {
				i := &r.Info
				wi, wd, werr := d.Revision(ctx, "m", i.ResourceID, i.RevisionID, i.SchemaVersion)
				gi, gd, gerr := s.Revision(ctx, "m", i.ResourceID, i.RevisionID, i.SchemaVersion)
				if werr != nil || gerr != nil {
					t.Fatalf("Revision: disk %v, S3 %v", werr, gerr)
				}
				wb, _ := wi.Encode(events.Msgpack)
				gb, _ := gi.Encode(events.Msgpack)
				if !bytes.Equal(wb, gb) || !bytes.Equal(wd, gd) {
					t.Errorf("slot %s %v: S3 holds %s, disk %s", i.RevisionID, store.SchemaDir(i.SchemaVersion), gd, wd)
				}
			}
		})
	}
}

func TestS3RefusesBadIdentifiers(t *testing.T) {
	e := newS3Env(t)
	s := e.open(t, "idents", Options{})
	ctx := context.Background()
	good := rev("11111111-1111-4111-8111-111111111111", "r", 1, "", "", 1, "{}")
	for _, tc := range []struct {
		name  string
		model string
		edit  func(*events.RevisionInfo)
	}{
		{"resource id with a slash", "m", func(i *events.RevisionInfo) { i.ResourceID = "a/b" }},
		{"resource id ..", "m", func(i *events.RevisionInfo) { i.ResourceID = ".." }},
		{"revision id with a slash", "m", func(i *events.RevisionInfo) { i.RevisionID = "r/1" }},
		{"empty model", "", func(*events.RevisionInfo) {}},
		{"model with a slash", "a/b", func(*events.RevisionInfo) {}},
		{"not a uid", "m", func(i *events.RevisionInfo) { i.UID = "x" }},
		{"schema version with a slash", "m", func(i *events.RevisionInfo) { i.SchemaVersion = events.Some("v/1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := *good
			r.Info = good.Info
			tc.edit(&r.Info)
			if _, err := s.ApplyRevision(ctx, tc.model, &r); !store.IsInvalid(err) {
				t.Fatalf("ApplyRevision: %v, want an InvalidError", err)
			}
		})
	}
	long := e.open(t, "idents", Options{Prefix: strings.Repeat("p/", 300) + "{model}/"})
	r := *good
	r.Info.ResourceID = strings.Repeat("r", 240)
	r.Info.RevisionID = strings.Repeat("v", 250)
	if _, err := long.ApplyRevision(ctx, "m", &r); !store.IsInvalid(err) || !strings.Contains(err.Error(), "longer than S3 allows") {
		t.Fatalf("ApplyRevision of a key too long: %v, want an InvalidError", err)
	}
	if keys := e.keys(t, "idents"); len(keys) != 0 {
		t.Fatalf("bucket holds %q, want nothing", keys)
	}
	if _, err := s.ApplyPurge(ctx, "m", "a/b", events.Time{Time: time.Now()}); !store.IsInvalid(err) {
		t.Fatalf("ApplyPurge: %v, want an InvalidError", err)
	}
}

func TestS3ConditionalModes(t *testing.T) {
	e := newS3Env(t)
	recs := goldenRecords(t, "msgpack")
	for _, mode := range []string{condAuto, condINM, condHead} {
		t.Run(mode, func(t *testing.T) {
			bucket := "cond-" + mode
			s := e.open(t, bucket, Options{Conditional: mode})
			applyS3(t, s, recs)
			verifyS3(t, e, s, bucket, recs)
			outs := applyS3(t, s, recs)
			if c := countOutcomes(outs); c[store.Written] != 0 {
				t.Fatalf("replay wrote %d records", c[store.Written])
			}
		})
	}

	// A server without conditional writes: auto falls back to HEAD, the
	// explicit if-none-match mode fails.
	e.proxy.RejectIfNoneMatch(true)
	defer e.proxy.RejectIfNoneMatch(false)
	s := e.open(t, "cond-fallback", Options{})
	applyS3(t, s, recs)
	verifyS3(t, e, s, "cond-fallback", recs)
	if !s.useHead() {
		t.Fatal("auto did not switch to HEAD-then-PUT")
	}
	strict := e.open(t, "cond-strict", Options{Conditional: condINM})
	r := recs[1]
	for _, rr := range recs {
		if rr.Rev != nil {
			r = rr
			break
		}
	}
	if _, err := strict.ApplyRevision(context.Background(), r.Model, r.Rev); err == nil || store.IsInvalid(err) {
		t.Fatalf("if-none-match against a server without it: %v, want a transient error", err)
	}
}

func TestS3SurvivesOutage(t *testing.T) {
	e := newS3Env(t)
	s := e.open(t, "outage", Options{maxBackoff: 500 * time.Millisecond})
	recs := goldenRecords(t, "small")
	e.proxy.Down(true)
	time.AfterFunc(300*time.Millisecond, func() { e.proxy.Down(false) })
	applyS3(t, s, recs)
	if e.proxy.Injected() == 0 {
		t.Fatal("no request failed during the outage")
	}
	verifyS3(t, e, s, "outage", recs)
}

func TestS3Purge(t *testing.T) {
	e := newS3Env(t)
	const bucket = "purge"
	s := e.open(t, bucket, Options{})
	ctx := context.Background()
	recs := goldenRecords(t, "medium")[:400] // 36 resources of 10 revisions
	applyS3(t, s, recs)
	before := e.keys(t, bucket)

	// The victim: the first issue resource, and every key its revisions own.
	var victim string
	uids := map[string]bool{}
	var latest time.Time
	for _, r := range recs {
		if r.Rev == nil || r.Model != "issue" {
			continue
		}
		if victim == "" {
			victim = r.Rev.Info.ResourceID
		}
		if r.Rev.Info.ResourceID == victim {
			uids[r.Rev.Info.UID] = true
			if u := r.Rev.Info.UpdatedTime.Instant(); u.After(latest) {
				latest = u
			}
		}
	}
	owned := func(k string) bool {
		if strings.HasPrefix(k, "issue/data/resources/resource/"+victim+"/") {
			return true
		}
		parts := strings.Split(k, "/")
		return strings.HasPrefix(k, "issue/data/resources/store/") && uids[parts[4]]
	}

	// Purged before its revisions were last updated: a re-creation, kept.
	early := events.Time{Time: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if out, err := s.ApplyPurge(ctx, "issue", victim, early); err != nil || out != store.Unchanged {
		t.Fatalf("early purge = %v, %v; want unchanged", out, err)
	}
	if got := e.keys(t, bucket); !slices.Equal(got, before) {
		t.Fatal("an early purge removed keys")
	}

	at := events.Time{Time: latest}
	if out, err := s.ApplyPurge(ctx, "issue", victim, at); err != nil || out != store.Written {
		t.Fatalf("purge = %v, %v; want written", out, err)
	}
	var want []string
	for _, k := range before {
		if !owned(k) {
			want = append(want, k)
		}
	}
	if len(want) == len(before) {
		t.Fatal("the victim owns no keys")
	}
	if got := e.keys(t, bucket); !slices.Equal(got, want) {
		t.Fatalf("after the purge %d keys, want %d (exactly the victim's removed)", len(got), len(want))
	}
	if _, _, err := s.Revision(ctx, "issue", victim, victim+":1", events.Opt[string]{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Revision after purge: %v, want not exist", err)
	}
	if out, err := s.ApplyPurge(ctx, "issue", victim, at); err != nil || out != store.Unchanged {
		t.Fatalf("second purge = %v, %v; want unchanged", out, err)
	}

	// A purge that crashed after deleting the index objects: its list is
	// left, and the next purge of the resource deletes the store entries.
	var second string
	secondUIDs := []string{}
	for _, r := range recs {
		if r.Rev != nil && r.Model == "issue" && r.Rev.Info.ResourceID != victim {
			if second == "" {
				second = r.Rev.Info.ResourceID
			}
			if r.Rev.Info.ResourceID == second {
				secondUIDs = append(secondUIDs, r.Rev.Info.UID)
			}
		}
	}
	if _, err := s.put(ctx, bucket, s.purgeListKey("issue", second), []byte(strings.Join(secondUIDs, "\n")), "", false); err != nil {
		t.Fatal(err)
	}
	var idx []string
	for _, k := range e.keys(t, bucket) {
		if strings.HasPrefix(k, "issue/data/resources/resource/"+second+"/") {
			idx = append(idx, k)
		}
	}
	if err := s.deleteAll(ctx, bucket, idx); err != nil {
		t.Fatal(err)
	}
	if out, err := s.ApplyPurge(ctx, "issue", second, at); err != nil || out != store.Written {
		t.Fatalf("purge after a crash = %v, %v; want written", out, err)
	}
	for _, k := range e.keys(t, bucket) {
		for _, u := range secondUIDs {
			if strings.Contains(k, u) {
				t.Fatalf("%s left after the crashed purge was finished", k)
			}
		}
		if strings.Contains(k, s3PurgeDir) {
			t.Fatalf("purge list %s left", k)
		}
	}
}

func TestS3ReadSide(t *testing.T) {
	e := newS3Env(t)
	const bucket = "walks"
	s := e.open(t, bucket, Options{Concurrency: 4})
	ctx := context.Background()
	recs := goldenRecords(t, "msgpack")
	applyS3(t, s, recs)
	// Keys that are not blobs of the blob store.
	for _, k := range []string{"blobs/_sessions/abc", "blobs/_uploads/abc", "blobs/readme.txt", "blobs/0123456789ABCDEF0123456789ABCDEF"} {
		if _, err := s.put(ctx, bucket, k, []byte("x"), "", false); err != nil {
			t.Fatal(err)
		}
	}

	models, err := s.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(models, []string{"ticket", "user"}) {
		t.Fatalf("Models = %q", models)
	}

	// Expected: each uid's newest record (the migrated copy wins).
	byUID := map[string]map[string]*events.RawResource{}
	byResource := map[string][]string{}
	for _, r := range recs {
		if r.Rev == nil {
			continue
		}
		if byUID[r.Model] == nil {
			byUID[r.Model] = map[string]*events.RawResource{}
		}
		i := &r.Rev.Info
		byUID[r.Model][i.UID] = r.Rev
		slot := r.Model + " " + i.ResourceID
		key := i.RevisionID + "/" + store.SchemaDir(i.SchemaVersion)
		if !slices.Contains(byResource[slot], key) {
			byResource[slot] = append(byResource[slot], key)
		}
	}
	for _, model := range models {
		var got []string
		err := s.WalkRevisions(ctx, model, func(res *events.RawResource) error {
			want := byUID[model][res.Info.UID]
			if want == nil {
				return fmt.Errorf("unexpected uid %s", res.Info.UID)
			}
			wb, _ := want.Info.Encode(events.Msgpack)
			gb, _ := res.Info.Encode(events.Msgpack)
			if !bytes.Equal(wb, gb) || !bytes.Equal(want.RawData, res.RawData) {
				t.Errorf("WalkRevisions %s %s differs", model, res.Info.UID)
			}
			got = append(got, res.Info.UID)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(byUID[model]) || !slices.IsSorted(got) {
			t.Fatalf("WalkRevisions %s: %d uids (sorted %v), want %d", model, len(got), slices.IsSorted(got), len(byUID[model]))
		}
	}
	stop := errors.New("stop")
	n := 0
	if err := s.WalkRevisions(ctx, "ticket", func(*events.RawResource) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("WalkRevisions stopped by fn: %v after %d calls", err, n)
	}

	for slot, keys := range byResource {
		model, rid, _ := strings.Cut(slot, " ")
		var got []string
		for res, err := range s.ResourceRevisions(ctx, model, rid) {
			if err != nil {
				t.Fatal(err)
			}
			if res.Info.ResourceID != rid {
				t.Fatalf("ResourceRevisions(%s) yielded %s", rid, res.Info.ResourceID)
			}
			got = append(got, res.Info.RevisionID)
		}
		if len(got) != len(keys) {
			t.Fatalf("ResourceRevisions(%s %s) = %q, want %d revisions", model, rid, got, len(keys))
		}
	}
	for _, err := range s.ResourceRevisions(ctx, "ticket", "nope") {
		t.Fatalf("ResourceRevisions of a missing resource yielded %v", err)
	}

	var blobs []string
	err = s.WalkBlobs(ctx, func(b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error {
		var want *events.BlobRecord
		for _, r := range recs {
			if r.Blob != nil && r.Blob.FileID == b.FileID.Value {
				want = r.Blob
			}
		}
		if want == nil {
			return fmt.Errorf("unexpected blob %s", b.FileID.Value)
		}
		rc, err := open(ctx)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		if err != nil {
			return err
		}
		if !bytes.Equal(data, want.BlobData) || b.Size.Value != want.Size || b.ContentType.Value != want.ContentType {
			t.Errorf("blob %s: %d bytes %q, want %d %q", want.FileID, len(data), b.ContentType.Value, want.Size, want.ContentType)
		}
		blobs = append(blobs, b.FileID.Value)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(blobs) != 1 {
		t.Fatalf("WalkBlobs saw %q, want the one blob", blobs)
	}

	if _, err := s.Meta(ctx, "ticket", "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Meta: %v, want not exist", err)
	}
	if _, _, err := s.OpenBlob(ctx, dedup.FileID([]byte("absent"))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenBlob of an absent blob: %v, want not exist", err)
	}
	if _, _, err := s.Revision(ctx, "ticket", "nope", "nope:1", events.Opt[string]{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Revision of an absent resource: %v, want not exist", err)
	}

	flat := e.open(t, bucket, Options{Prefix: "all/"})
	if _, err := flat.Models(ctx); err == nil {
		t.Fatal("Models without {model} in the prefix: no error")
	}
}

func TestS3ModelsWithPrefixAroundModel(t *testing.T) {
	e := newS3Env(t)
	s := e.open(t, "models", Options{Prefix: "specstar/{model}-store/"})
	recs := goldenRecords(t, "small")
	applyS3(t, s, recs)
	if k := e.keys(t, "models"); !strings.HasPrefix(k[0], "specstar/issue-store/resources/") {
		t.Fatalf("first key %s", k[0])
	}
	models, err := s.Models(context.Background())
	if err != nil || !slices.Equal(models, []string{"issue", "user"}) {
		t.Fatalf("Models = %q, %v", models, err)
	}
}

func TestOpenS3(t *testing.T) {
	e := newS3Env(t)
	e.srv.CreateBucket(t, "exists")
	for _, kv := range e.srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	ctx := context.Background()
	s, err := Open(ctx, Options{Bucket: "exists", Endpoint: e.srv.Endpoint, PathStyle: true})
	if err != nil {
		t.Fatalf("OpenS3 with credentials from the environment: %v", err)
	}
	if got := s.String(); got != "s3://exists/{model}/data/" {
		t.Fatalf("String() = %q", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyRevision(ctx, "m", rev("11111111-1111-4111-8111-111111111111", "r", 1, "", "", 1, "{}")); err == nil {
		t.Fatal("ApplyRevision after Close: no error")
	}
	_, err = Open(ctx, Options{Bucket: "missing", Endpoint: e.srv.Endpoint, PathStyle: true})
	if err == nil || !strings.Contains(err.Error(), `"missing" does not exist`) {
		t.Fatalf("OpenS3 of a missing bucket: %v", err)
	}
	_, err = Open(ctx, Options{Bucket: "exists", BlobBucket: "missing-blobs", Endpoint: e.srv.Endpoint, PathStyle: true})
	if err == nil || !strings.Contains(err.Error(), "missing-blobs") {
		t.Fatalf("OpenS3 with a missing blob bucket: %v", err)
	}
	for _, bad := range []Options{
		{},
		{Bucket: "exists", PartSize: 1 << 20},
		{Bucket: "exists", Conditional: "maybe"},
		{Bucket: "exists", Concurrency: -1},
		{Bucket: "exists", BlobPrefix: "{model}/blobs/"},
	} {
		if _, err := Open(ctx, bad); err == nil {
			t.Errorf("OpenS3(%+v): no error", bad)
		}
	}
}

func TestParseS3URL(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		want    Options
		wantErr string
	}{
		{raw: "s3://bucket", want: Options{Bucket: "bucket"}},
		{raw: "s3://bucket/", want: Options{Bucket: "bucket"}},
		{raw: "s3://bucket/{model}/data/", want: Options{Bucket: "bucket", Prefix: "{model}/data/"}},
		{raw: "s3://bucket/%7Bmodel%7D/data/", want: Options{Bucket: "bucket", Prefix: "{model}/data/"}},
		{raw: "s3://bucket/x/y?blob_prefix=b/&blob_bucket=bb", want: Options{Bucket: "bucket", Prefix: "x/y", BlobBucket: "bb", BlobPrefix: "b/"}},
		{
			raw: "s3://b/p/?endpoint=http://127.0.0.1:7070&region=eu-west-1&path_style=true&encoding=json&concurrency=4&part_size=16MiB&conditional=head&max_attempts=3",
			want: Options{Bucket: "b", Prefix: "p/", Endpoint: "http://127.0.0.1:7070", Region: "eu-west-1", PathStyle: true,
				Encoding: events.Some(events.JSON), Concurrency: 4, PartSize: 16 << 20, Conditional: "head", MaxAttempts: 3},
		},
		{raw: "s3://b?part_size=5242880&encoding=msgpack", want: Options{Bucket: "b", PartSize: 5 << 20, Encoding: events.Some(events.Msgpack)}},
		{raw: "s3://b/app?factory=s3&cache_dir=/var/cache/x&cache_models=8", want: Options{Bucket: "b", Prefix: "app", Factory: true, CacheDir: "/var/cache/x", CacheModels: 8}},
		{raw: "s3://b?factory=postgres", wantErr: "factory="},
		{raw: "s3://b?factory=s3&cache_models=0", wantErr: "cache_models="},
		{raw: "s3://b?cache_dir=", wantErr: "cache_dir="},
		{raw: "http://b/p", wantErr: "scheme"},
		{raw: "s3:///p", wantErr: "no bucket"},
		{raw: "s3://host:9000/p", wantErr: "endpoint="},
		{raw: "s3://key:secret@b/p", wantErr: "credentials"},
		{raw: "s3://b?colour=red", wantErr: `unknown option "colour"`},
		{raw: "s3://b?encoding=xml", wantErr: "encoding="},
		{raw: "s3://b?concurrency=0", wantErr: "concurrency="},
		{raw: "s3://b?part_size=1MiB", wantErr: "part_size="},
		{raw: "s3://b?part_size=big", wantErr: "part_size="},
		{raw: "s3://b?conditional=maybe", wantErr: "conditional="},
		{raw: "s3://b?max_attempts=-1", wantErr: "max_attempts="},
		{raw: "s3://b?path_style=perhaps", wantErr: "path_style="},
		{raw: "s3://b?endpoint=ftp://x", wantErr: "endpoint="},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			got, err := ParseURL(tc.raw)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.raw) {
					t.Fatalf("error %v, want one naming the URL and %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestFactoryURLLayout: a factory URL's path is the base below which each
// model has its meta.db and resource store, and the blob store is
// {base}blobs/, whether the URL is opened as the factory or as a
// deployment's blob store; json is the factory's encoding unless said.
func TestFactoryURLLayout(t *testing.T) {
	for _, tc := range []struct {
		raw                        string
		prefix, blobPrefix, blobOf string
		enc                        events.Encoding
	}{
		{"s3://b?factory=s3", "{model}/", "blobs/", "blobs/", events.JSON},
		{"s3://b/app?factory=s3", "app/{model}/", "app/blobs/", "app/blobs/", events.JSON},
		{"s3://b/app/?factory=s3&encoding=msgpack&blob_prefix=bl/", "app/{model}/", "bl/", "bl/", events.Msgpack},
	} {
		o, err := ParseURL(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		o, err = o.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if o.Prefix != tc.prefix || o.BlobPrefix != tc.blobPrefix || o.Encoding.Value != tc.enc {
			t.Errorf("%s: prefix %q blob prefix %q encoding %v", tc.raw, o.Prefix, o.BlobPrefix, o.Encoding)
		}
		b, err := ParseBlobURL(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		if b.BlobPrefix != tc.blobOf || b.Factory {
			t.Errorf("%s as a blob store: blob prefix %q factory %v", tc.raw, b.BlobPrefix, b.Factory)
		}
	}
	o, _ := ParseURL("s3://b/{model}/x?factory=s3")
	if _, err := o.withDefaults(); err == nil {
		t.Error("a factory prefix holding {model} was accepted")
	}
}

// openDisk opens a disk sink to compare with: the S3 sink follows the
// disk sink's rules for uids and index entries.
func openDisk(t *testing.T, root string, opts disk.Options) *disk.Sink {
	t.Helper()
	d, err := disk.Open(context.Background(), root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
