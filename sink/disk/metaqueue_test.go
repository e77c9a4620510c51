package disk

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// TestMetasWrittenOncePerBatch: a resource updated several times in one
// batch has its meta file written at Flush, once, with the newest meta
// (before, every update replaced the file: a rename and fsyncs each,
// which made the disk sink the bottleneck of a live tail); reads through
// the sink see the newest meta before the Flush, and a purge in the same
// batch decides on the queued meta as it would on the file (and removes
// at once, as before).
func TestMetasWrittenOncePerBatch(t *testing.T) {
	ctx := context.Background()
	const model, rid = "issue", "issue:1"
	meta := func(at string, n int64) *events.ResourceMeta { return sinktestutil.Meta(t, rid, at, n, "a") }
	type step struct {
		meta     *events.ResourceMeta // or a purge at purgeAt
		purgeAt  string
		want     store.Outcome
		flushNow bool
		// seal ends the batch after the step (sink.Overlapper): later
		// steps decide against its metas, which only flushSealed writes.
		seal, flushSealed bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  *events.ResourceMeta // the file after the last Flush; nil: none
	}{
		{"updates", []step{
			{meta: meta("2024-05-01T00:00:00Z", 1), want: store.Written},
			{meta: meta("2024-05-02T00:00:00Z", 2), want: store.Written},
			{meta: meta("2024-05-01T12:00:00Z", 1), want: store.Stale}, // older than the queued one
			{meta: meta("2024-05-03T00:00:00Z", 3), want: store.Written},
		}, meta("2024-05-03T00:00:00Z", 3)},
		{"new resource purged in its batch", []step{
			{meta: meta("2024-05-01T00:00:00Z", 1), want: store.Written},
			{purgeAt: "2024-05-02T00:00:00Z", want: store.Written},
		}, nil},
		{"stored meta, newer one purged in its batch", []step{
			{meta: meta("2024-05-01T00:00:00Z", 1), want: store.Written, flushNow: true},
			{meta: meta("2024-05-02T00:00:00Z", 2), want: store.Written},
			{purgeAt: "2024-05-03T00:00:00Z", want: store.Written},
		}, nil},
		{"re-created after the purge", []step{
			{meta: meta("2024-05-01T00:00:00Z", 1), want: store.Written, flushNow: true},
			{meta: meta("2024-05-03T00:00:00Z", 2), want: store.Written},
			{purgeAt: "2024-05-02T00:00:00Z", want: store.Stale},
		}, meta("2024-05-03T00:00:00Z", 2)},
		// A batch sealed and being flushed while the next is applied: the
		// next decides against the sealed metas, not the file.
		{"decided against a sealed meta", []step{
			{meta: meta("2024-05-02T00:00:00Z", 2), want: store.Written, seal: true},
			{meta: meta("2024-05-01T00:00:00Z", 1), want: store.Stale}, // older than the sealed one, though no file yet
			{meta: meta("2024-05-03T00:00:00Z", 3), want: store.Written, flushSealed: true},
		}, meta("2024-05-03T00:00:00Z", 3)},
		{"sealed new meta purged before its flush", []step{
			{meta: meta("2024-05-01T00:00:00Z", 1), want: store.Written, seal: true},
			{purgeAt: "2024-05-02T00:00:00Z", want: store.Written, flushSealed: true},
		}, nil},
		{"stored meta, sealed and queued ones purged", []step{
			{meta: meta("2024-05-01T00:00:00Z", 1), want: store.Written, flushNow: true},
			{meta: meta("2024-05-02T00:00:00Z", 2), want: store.Written, seal: true},
			{meta: meta("2024-05-03T00:00:00Z", 3), want: store.Written},
			{purgeAt: "2024-05-04T00:00:00Z", want: store.Written, flushSealed: true},
		}, nil},
		{"purge older than a sealed meta", []step{
			{meta: meta("2024-05-01T00:00:00Z", 1), want: store.Written, flushNow: true},
			{meta: meta("2024-05-03T00:00:00Z", 2), want: store.Written, seal: true},
			{purgeAt: "2024-05-02T00:00:00Z", want: store.Stale, flushSealed: true},
		}, meta("2024-05-03T00:00:00Z", 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			d := openT(t, root, Options{})
			path := filepath.Join(root, model, "meta", rid+store.MetaSuffix)
			var onDisk []byte // what the file held after the last Flush
			for i, s := range tc.steps {
				var out store.Outcome
				var err error
				if s.meta != nil {
					out, err = d.ApplyMeta(ctx, model, s.meta)
				} else {
					out, err = d.ApplyPurge(ctx, model, rid, sinktestutil.MustTime(t, s.purgeAt))
				}
				if err != nil || out != s.want {
					t.Fatalf("step %d: %v %v, want %v", i, out, err, s.want)
				}
				if s.meta == nil {
					onDisk = fileBytes(t, path) // a purge removes at once
				}
				if s.flushNow {
					if err := d.Flush(ctx); err != nil {
						t.Fatal(err)
					}
					onDisk = fileBytes(t, path)
				}
				if s.seal {
					d.Seal()
				}
				if s.flushSealed {
					if err := d.FlushSealed(ctx); err != nil {
						t.Fatal(err)
					}
					onDisk = fileBytes(t, path)
				}
				if got := fileBytes(t, path); !bytes.Equal(got, onDisk) {
					t.Fatalf("step %d: the meta file changed before Flush: %q, was %q", i, got, onDisk)
				}
			}
			if tc.want != nil {
				if m, err := d.Meta(ctx, model, rid); err != nil || m.TotalRevisionCount != tc.want.TotalRevisionCount {
					t.Fatalf("Meta before Flush: %+v %v, want the newest (count %d)", m, err, tc.want.TotalRevisionCount)
				}
			}
			if err := d.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			got := fileBytes(t, path)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("after Flush the meta file holds %q, want none", got)
				}
				return
			}
			want, err := tc.want.Encode(events.JSON)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("after Flush the meta file holds %q, want %q", got, want)
			}
		})
	}
}

// fileBytes is a file's content, nil if it does not exist.
func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}
