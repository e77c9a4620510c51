package lazyfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mount serves a fresh backing directory at a fresh mount point, and
// fails the test, saying what is missing, where FUSE cannot mount.
func mount(t *testing.T) (*FS, string) {
	t.Helper()
	dir, backing := t.TempDir(), t.TempDir()
	l, err := Mount(dir, backing)
	if err != nil {
		t.Fatalf("lazyfs tests need FUSE (root, /dev/fuse; .ci/run installs fuse3): %v", err)
	}
	t.Cleanup(func() { l.Unmount() })
	return l, backing
}

func write(t *testing.T, path string, data []byte, off int64, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCutKeepsWhatWasSynced: after a cut each file holds what its last
// fsync left, whatever came after it (appends, overwrites, truncates,
// new files, renames), and the mount refuses further writes.
func TestCutKeepsWhatWasSynced(t *testing.T) {
	l, backing := mount(t)
	in := func(name string) string { return filepath.Join(l.Dir(), name) }
	synced := bytes.Repeat([]byte("s"), 10000)

	// a: synced, then appended to and partly overwritten.
	write(t, in("a"), synced, 0, true)
	write(t, in("a"), []byte("APPENDED"), int64(len(synced)), false)
	write(t, in("a"), []byte("OVER"), 100, false)
	// b: synced, then truncated by name.
	write(t, in("b"), synced, 0, true)
	if err := os.Truncate(in("b"), 10); err != nil {
		t.Fatal(err)
	}
	write(t, in("b"), []byte("x"), 5000, false)
	// c: written and synced in one go; d: written, never synced.
	write(t, in("c"), synced, 0, true)
	write(t, in("d"), synced, 0, false)
	// e: the write-then-rename idiom without an fsync.
	write(t, in("e.tmp"), synced, 0, false)
	if err := os.Rename(in("e.tmp"), in("e")); err != nil {
		t.Fatal(err)
	}
	// f: overwritten, then synced through another descriptor.
	write(t, in("f"), synced, 0, true)
	write(t, in("f"), []byte("NEW"), 0, false)
	write(t, in("f"), nil, 0, true)

	if p := l.Pending(); p.Files != 4 {
		t.Errorf("pending: %d files, want 4 (a, b, d, e)", p.Files)
	}
	lost, err := l.Cut()
	if err != nil {
		t.Fatal(err)
	}
	if lost.Files != 4 || lost.Bytes == 0 {
		t.Errorf("cut lost %+v, want 4 files and some bytes", lost)
	}
	if err := os.WriteFile(in("g"), []byte("after"), 0o644); !errors.Is(err, syscall.EIO) {
		t.Errorf("a write after the cut: %v, want EIO", err)
	}
	if err := l.Unmount(); err != nil {
		t.Fatal(err)
	}

	fNew := append([]byte("NEW"), synced[3:]...)
	for _, tc := range []struct {
		name string
		want []byte
	}{
		{"a", synced},
		{"b", synced},
		{"c", synced},
		{"d", nil},
		{"e", nil},
		{"f", fNew},
	} {
		got, err := os.ReadFile(filepath.Join(backing, tc.name))
		if err != nil {
			t.Errorf("%s: %v (a name survives a cut)", tc.name, err)
			continue
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s after the cut: %d bytes %.12q, want %d bytes %.12q", tc.name, len(got), got, len(tc.want), tc.want)
		}
	}
}
