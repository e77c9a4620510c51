package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/specstar/replicator/events"
)

// TestLagSinkCount checks the benchmarks' fast read of a disk sink's meta
// against the whole decode, for metas as the sink encodes them.
func TestLagSinkCount(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, lagModel, "meta"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{0, 7, 123456789} {
		m := &events.ResourceMeta{CurrentRevisionID: "r:1", ResourceID: "r", TotalRevisionCount: n, CreatedBy: "a", UpdatedBy: "a"}
		raw, err := m.Encode(events.JSON)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, lagModel, "meta", "r.data"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := lagSinkCount(dir, "r"); got != n {
			t.Errorf("count %d: read %d from %s", n, got, raw)
		}
	}
	if got := lagSinkCount(dir, "absent"); got != 0 {
		t.Errorf("no meta: read %d, want 0", got)
	}
}
