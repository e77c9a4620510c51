package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/s3"
)

// TestServerHonoursIfMatch records what the test server (versitygw) does
// with the conditional headers the factory's upload sends: a PUT with
// If-Match on a stale ETag, or If-None-Match: * on an existing object, is
// refused with 412, and one on the current ETag succeeds. The factory's
// default mode relies on it; a server that ignores them is covered only
// by the HEAD before each upload (see the README).
func TestServerHonoursIfMatch(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "ifmatch")
	c := srv.Client(t)
	put := func(body string, ifMatch, ifNoneMatch *string) (string, int) {
		t.Helper()
		out, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String("ifmatch"), Key: aws.String("k"),
			Body: bytes.NewReader([]byte(body)), IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
		if err != nil {
			var re interface{ HTTPStatusCode() int }
			var ae smithy.APIError
			if errors.As(err, &re) && errors.As(err, &ae) {
				return ae.ErrorCode(), re.HTTPStatusCode()
			}
			t.Fatalf("put %q: %v", body, err)
		}
		return aws.ToString(out.ETag), http.StatusOK
	}
	first, code := put("one", nil, aws.String("*"))
	if code != http.StatusOK {
		t.Fatalf("create with If-None-Match: *: %d", code)
	}
	if _, code := put("two", nil, aws.String("*")); code != http.StatusPreconditionFailed {
		t.Errorf("If-None-Match: * over an existing object: %d, want 412", code)
	}
	second, code := put("three", aws.String(first), nil)
	if code != http.StatusOK {
		t.Fatalf("If-Match on the current ETag: %d", code)
	}
	if _, code := put("four", aws.String(first), nil); code != http.StatusPreconditionFailed {
		t.Errorf("If-Match on a stale ETag: %d, want 412", code)
	}
	if _, code := put("five", aws.String(second), nil); code != http.StatusOK {
		t.Errorf("If-Match on the current ETag again: %d", code)
	}
}

// TestFactoryConflict: a second writer uploads meta.db between the first
// writer's download and its upload, once when the model's meta.db does
// not exist yet and once over an existing one. The first writer's upload
// is refused, it reloads, applies its batch again (newer wins) and
// uploads: the other writer's rows survive, its newer meta of a resource
// both wrote stays, and the first writer's other metas are added. With
// If-Match (auto) and with HEAD-then-PUT alike.
func TestFactoryConflict(t *testing.T) {
	srv := s3test.Start(t)
	for i, mode := range []string{"auto", "head"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			bucket := fmt.Sprintf("conflict-%d", i)
			srv.CreateBucket(t, bucket)
			open := func() *s3.Factory {
				f, err := s3.OpenFactoryMode(ctx, srv, bucket, factoryPrefix, t.TempDir(), mode)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				return f
			}
			apply := func(f *s3.Factory, m *events.ResourceMeta, want sink.Outcome) {
				t.Helper()
				if out, err := f.ApplyMeta(ctx, "issue", m); err != nil || out != want {
					t.Fatalf("apply %s by %s: %v %v, want %v", m.ResourceID, m.UpdatedBy, out, err, want)
				}
			}
			flush := func(f *s3.Factory) {
				t.Helper()
				if err := f.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			meta := func(rid, at string, by string) *events.ResourceMeta {
				return sinktestutil.Meta(t, rid, at, 1, by)
			}
			a, b := open(), open()

			// No meta.db yet: both create one.
			apply(a, meta("a1", "2024-05-01T00:00:00Z", "a"), sink.Written)
			apply(b, meta("b1", "2024-05-01T00:00:00Z", "b"), sink.Written)
			flush(b)
			flush(a)
			if a.Conflicts() == 0 {
				t.Error("the first writer's upload over the other's new file was not refused")
			}

			// Over an existing meta.db: a reads it (a2), b changes it, a uploads.
			apply(a, meta("a2", "2024-05-01T00:00:00Z", "a"), sink.Written)
			apply(a, meta("shared", "2024-05-01T00:00:00Z", "a"), sink.Written)
			apply(a, meta("b1", "2024-04-01T00:00:00Z", "a-older"), sink.Stale)
			apply(b, meta("shared", "2024-05-02T00:00:00Z", "b-newer"), sink.Written)
			apply(b, meta("b2", "2024-05-01T00:00:00Z", "b"), sink.Written)
			flush(b)
			before := a.Conflicts()
			flush(a)
			if a.Conflicts() == before {
				t.Error("the first writer's upload over the other's changed file was not refused")
			}

			// What a third reader (SpecStar's view) finds in S3.
			c := open()
			for rid, by := range map[string]string{"a1": "a", "b1": "b", "a2": "a", "b2": "b", "shared": "b-newer"} {
				got, err := c.Meta(ctx, "issue", rid)
				if err != nil {
					t.Errorf("%s: %v", rid, err)
					continue
				}
				if got.UpdatedBy != by {
					t.Errorf("%s: updated by %q, want %q", rid, got.UpdatedBy, by)
				}
			}
			var ids []string
			for id, err := range c.ResourceIDs(ctx, "issue") {
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			if fmt.Sprint(ids) != "[a1 a2 b1 b2 shared]" {
				t.Errorf("meta.db holds %q", ids)
			}
			// b's copy catches up on a's upload when read.
			b.SetRefresh(0)
			if _, err := b.Meta(ctx, "issue", "a2"); err != nil {
				t.Errorf("the other writer does not see a2 after re-reading: %v", err)
			}
			if _, err := c.Meta(ctx, "issue", "nope"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("absent meta: %v", err)
			}
		})
	}
}

// TestFactoryIfMatchClosesTheWindow: another writer uploading after the
// HEAD that checked the ETag and before the PUT is still caught, by the
// PUT's If-Match (refused with 412 by a server honouring it): its row
// survives. This is the window HEAD-then-PUT alone leaves open.
func TestFactoryIfMatchClosesTheWindow(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "window")
	open := func() *s3.Factory {
		f, err := s3.OpenFactoryOn(ctx, srv, "window", factoryPrefix, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b := open(), open()
	for _, step := range []struct{ a, b string }{{"a1", "b1"}, {"a2", "b2"}} { // no file yet, then an existing one
		if _, err := a.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, step.a, "2024-05-01T00:00:00Z", 1, "a")); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, step.b, "2024-05-01T00:00:00Z", 1, "b")); err != nil {
			t.Fatal(err)
		}
		b.SetRefresh(0)
		once := false
		a.SetBeforePut(func() {
			if once {
				return
			}
			once = true
			if err := b.Flush(ctx); err != nil {
				t.Error(err)
			}
		})
		before := a.Conflicts()
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		a.SetBeforePut(nil)
		if !once || a.Conflicts() == before {
			t.Fatalf("%s: the upload between HEAD and PUT was not refused", step.a)
		}
	}
	c := open()
	for _, rid := range []string{"a1", "b1", "a2", "b2"} {
		if _, err := c.Meta(ctx, "issue", rid); err != nil {
			t.Errorf("%s: %v", rid, err)
		}
	}
}
