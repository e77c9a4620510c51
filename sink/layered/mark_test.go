package layered_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/layered"
)

// TestMarkNeedsEveryLayer: a layered sink is marked only while every
// store that keeps marks holds the consumer's, so that one layer that
// lost its contents (here the metas' tree) has the stream delivered again.
func TestMarkNeedsEveryLayer(t *testing.T) {
	ctx := context.Background()
	metaRoot, resRoot := filepath.Join(t.TempDir(), "metas"), filepath.Join(t.TempDir(), "revisions")
	open := func() *layered.Sink {
		meta, err := disk.Open(ctx, metaRoot, disk.Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := disk.Open(ctx, resRoot, disk.Options{})
		if err != nil {
			t.Fatal(err)
		}
		l := layered.New("test", meta, res, nil)
		t.Cleanup(func() { l.Close() })
		return l
	}
	l := open()
	check := func(want bool, when string) {
		t.Helper()
		got, err := l.Marked(ctx, "c1")
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: Marked = %v, want %v", when, got, want)
		}
	}
	check(false, "before Mark")
	if err := l.Mark(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	check(true, "after Mark")
	if err := os.RemoveAll(filepath.Join(metaRoot, disk.MarkDir)); err != nil {
		t.Fatal(err)
	}
	check(false, "after the meta layer lost its mark")
	if err := l.Mark(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	check(true, "after marking again")
	if ok, err := l.Marked(ctx, "c2"); err != nil || ok {
		t.Fatalf("another consumer: Marked = %v, %v; want false", ok, err)
	}
}
