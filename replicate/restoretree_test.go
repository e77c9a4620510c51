package replicate

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/specstar/replicator/stream"
)

// TestKilledExportsTreesAreSwept (issue 33, item 6): `writer export --at`
// restores into a temporary tree beside the archive; a killed export left
// it (about 200 MB for a 7 MB stream) and no later export removed it. A
// tree whose process is gone (its lock free: the kernel drops a killed
// process's flock, as closing the file here does) is removed by the next
// RestoreTree beside it, as is an hour-old one without a lock (from a
// version before the locks); a live export's tree and a fresh unlocked
// one (a process between making and locking it) stay.
func TestKilledExportsTreesAreSwept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	parent := t.TempDir()
	out := filepath.Join(parent, "as-of.acbak")
	tree := func() *Tree {
		t.Helper()
		// The stream is empty: the restore fails, after making its tree.
		tr, _, err := RestoreTree(ctx, bus, out, RestoreOptions{Config: DefaultConfig(), AtSeq: 1, Name: "export", Logger: quiet})
		if tr == nil {
			t.Fatalf("no tree made: %v", err)
		}
		return tr
	}
	unlocked := func(age time.Duration) string {
		t.Helper()
		dir, err := os.MkdirTemp(parent, treePrefix)
		if err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-age)
		if err := os.Chtimes(dir, when, when); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	live := tree()
	killed := tree()
	killed.lock.Close()
	old, fresh := unlocked(2*time.Hour), unlocked(0)

	next := tree()
	defer next.Remove()
	defer live.Remove()
	for _, c := range []struct {
		what, dir string
		kept      bool
	}{
		{"a live export's tree", live.Dir, true},
		{"a killed export's tree", killed.Dir, false},
		{"an hour-old tree without a lock", old, false},
		{"a fresh tree without a lock", fresh, true},
		{"the new export's tree", next.Dir, true},
	} {
		_, err := os.Stat(c.dir)
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s (%s): kept %v, want %v", c.what, c.dir, kept, c.kept)
		}
	}
}
