package fsprobe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	for _, c := range []struct{ dir, fstype string }{
		{"/proc", "proc"},
		{"/proc/self", "proc"},
		{"/dev/shm", "tmpfs"},
	} {
		if _, err := os.Stat(c.dir); err != nil {
			t.Fatalf("%s: %v (this test needs it)", c.dir, err)
		}
		if got := Describe(c.dir); !strings.HasPrefix(got, c.fstype+" (") {
			t.Errorf("Describe(%s) = %q, want the %s file system", c.dir, got, c.fstype)
		}
	}
}

func TestCostLeavesWhatItMade(t *testing.T) {
	dir := t.TempDir()
	// The time itself is the machine's; what it leaves is checked.
	_, made, err := Cost(dir, 50)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(made)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 50 {
		t.Fatalf("made %d directories, want 50", len(entries))
	}
	data, err := os.ReadFile(filepath.Join(made, entries[0].Name(), "data"))
	if err != nil || len(data) != 600 {
		t.Fatalf("a probe file holds %d bytes (%v), want 600", len(data), err)
	}
}
