package disk

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/specstar/replicator/sink/internal/store"
)

// TestSyncPerBatch: with one syncfs per batch instead of an fsync per
// file, the sink writes exactly the same tree, and a blob file cut short
// (what a power loss can leave in that mode) is rewritten when its event
// comes again.
func TestSyncPerBatch(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			recs := readArchive(t, v.name)
			perFile := t.TempDir()
			applyAll(t, openDisk(t, perFile, v.opts), recs)
			opts := v.opts
			opts.SyncPerBatch = true
			perBatch := t.TempDir()
			d := openDisk(t, perBatch, opts)
			applyAll(t, d, recs)
			if err := d.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if diffs := diffSnapshots(snapshot(t, perFile), snapshot(t, perBatch)); len(diffs) > 0 {
				t.Fatalf("per-batch sync wrote a different tree: %v", diffs)
			}
			blobs, _ := filepath.Glob(filepath.Join(perBatch, store.BlobsDir, "*"))
			if len(blobs) == 0 {
				return
			}
			want, _ := os.ReadFile(blobs[0])
			if err := os.Truncate(blobs[0], int64(len(want)/2)); err != nil {
				t.Fatal(err)
			}
			applyAll(t, d, recs)
			if got, _ := os.ReadFile(blobs[0]); string(got) != string(want) {
				t.Fatalf("a cut-short blob file was not rewritten (%d bytes, want %d)", len(got), len(want))
			}
		})
	}
}
