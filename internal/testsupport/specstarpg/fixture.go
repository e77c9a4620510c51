package specstarpg

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
)

// Resource is what a Writer stored for one resource: its latest write
// (whose Meta is the current meta) and every revision, so the readers'
// tests can say what they should read.
type Resource struct {
	Model string
	RID   string
	Last  *Written
	Revs  []*Written
}

// Deployment is the expected content of a deployment: model -> resource id
// -> resource.
type Deployment map[string]map[string]*Resource

// Add records one write.
func (d Deployment) Add(wr *Written) {
	if d[wr.Model] == nil {
		d[wr.Model] = map[string]*Resource{}
	}
	r := d[wr.Model][wr.Meta.ResourceID]
	if r == nil {
		r = &Resource{Model: wr.Model, RID: wr.Meta.ResourceID}
		d[wr.Model][wr.Meta.ResourceID] = r
	}
	r.Last = wr
	r.Revs = append(r.Revs, wr)
}

// Payload is a small user struct as SpecStar stores it, for tests.
func Payload(title string, n int) events.Value {
	return events.Struct{Fields: []events.StructField{{Name: "title", Value: title}, {Name: "n", Value: int64(n)}}, Declared: 2}
}

// Populate writes two models: "issue" (4 resources of 3 revisions; one
// with naive datetimes, one whose update changes the schema version) and
// "user" (3 resources of 2 revisions, one versioned), and returns what it
// wrote.
func Populate(t testing.TB, w *Writer) Deployment {
	t.Helper()
	ctx := context.Background()
	d := Deployment{}
	for _, m := range []string{"issue", "user"} {
		if err := w.CreateModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	must := func(wr *Written, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		d.Add(wr)
	}
	for i := 1; i <= 4; i++ {
		rid := fmt.Sprintf("issue:%03d", i)
		opt := Write{}
		if i == 2 {
			opt.At = events.Time{Time: time.Now().UTC(), Naive: true}
		}
		if i == 3 {
			opt.SchemaVersion = events.Some("v1")
		}
		must(w.Create(ctx, "issue", rid, Payload(rid, 0), opt))
		for n := 1; n < 3; n++ {
			if i == 2 {
				opt.At = events.Time{Time: time.Now().UTC(), Naive: true}
			}
			if i == 3 && n == 2 {
				opt.SchemaVersion = events.Some("v2")
			}
			opt.By = fmt.Sprintf("editor%d", n)
			must(w.Update(ctx, "issue", rid, Payload(rid, n), opt))
		}
	}
	for i := 1; i <= 3; i++ {
		rid := fmt.Sprintf("user:%03d", i)
		opt := Write{}
		if i == 1 {
			opt.SchemaVersion = events.Some("1")
		}
		must(w.Create(ctx, "user", rid, Payload(rid, 0), opt))
		must(w.Update(ctx, "user", rid, Payload(rid, 1), opt))
	}
	return d
}

// WithBlobs adds model "report" to d: two resources whose payloads
// reference blobs (one shared, one empty, one over 1 MiB), and returns the
// blobs' bytes by file_id.
func WithBlobs(t testing.TB, w *Writer, d Deployment) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	if err := w.CreateModel(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	var blobs []Blob
	for i, b := range [][]byte{[]byte("hello"), bytes.Repeat([]byte("large "), 300_000), {}} {
		blob, err := w.PutBlob(ctx, bytes.NewReader(b), []string{"text/plain", "application/octet-stream", ""}[i])
		if err != nil {
			t.Fatal(err)
		}
		data[blob.FileID], blobs = b, append(blobs, blob)
	}
	doc := func(title string, files ...Blob) events.Value {
		var refs []any
		for _, f := range files {
			refs = append(refs, f.Value())
		}
		return events.Struct{Declared: 2, Fields: []events.StructField{{Name: "title", Value: title}, {Name: "files", Value: refs}}}
	}
	for _, wr := range []func() (*Written, error){
		func() (*Written, error) { return w.Create(ctx, "report", "doc:1", doc("one", blobs[0]), Write{}) },
		func() (*Written, error) {
			return w.Update(ctx, "report", "doc:1", doc("one+", blobs[0], blobs[1]), Write{})
		},
		func() (*Written, error) {
			return w.Create(ctx, "report", "doc:2", doc("two", blobs[2]), Write{SchemaVersion: events.Some("v1")})
		},
	} {
		written, err := wr()
		if err != nil {
			t.Fatal(err)
		}
		d.Add(written)
	}
	return data
}
