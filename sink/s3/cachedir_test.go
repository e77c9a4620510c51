package s3

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCacheDirsOfKilledFactoriesAreSwept is issue 26 item 9: a killed
// all-S3 factory left its specstar-s3factory-* directory behind forever
// (7 after 6 kills). Opening the next factory's cache directory removes
// those whose lock is free (or that have none and are old), and keeps a
// live factory's, a new unlocked one and anything not a factory's.
func TestCacheDirsOfKilledFactoriesAreSwept(t *testing.T) {
	parent := t.TempDir()
	mk := func(name string, lock bool) string {
		t.Helper()
		p := filepath.Join(parent, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "0123.db"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(p, cacheLockName), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	killed := mk(cacheDirPrefix+"killed", true)
	live := mk(cacheDirPrefix+"live", true)
	oldUnlocked := mk(cacheDirPrefix+"old", false)
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(oldUnlocked, old, old); err != nil {
		t.Fatal(err)
	}
	newUnlocked := mk(cacheDirPrefix+"new", false)
	unrelated := mk("someone-else", false)
	if err := os.Chtimes(unrelated, old, old); err != nil {
		t.Fatal(err)
	}
	// A live factory: its lock held (a separate open file, as another
	// process's would be).
	held, err := os.OpenFile(filepath.Join(live, cacheLockName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	dir, lock, err := makeCacheDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("new cache directory %s: %v, %v; want mode 0700", dir, st.Mode(), err)
	}
	for p, want := range map[string]bool{killed: false, oldUnlocked: false, live: true, newUnlocked: true, unrelated: true, dir: true} {
		_, err := os.Stat(p)
		if got := err == nil; got != want {
			t.Errorf("%s exists: %v, want %v (%v)", filepath.Base(p), got, want, err)
		}
	}
	// The new directory is itself protected while its lock is held.
	sweepCacheDirs(parent)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a sweep removed a live factory's cache directory: %v", err)
	}
}

// TestFactoriesOpenedTogetherKeepTheirCacheDirs: two processes opening an
// all-S3 factory at once (a restore racing a run, in CI) could each sweep
// the other's new directory: its lock file existed but was not locked
// yet, so it looked like a killed factory's, and the next write to its
// meta database failed with "unable to open database file" for five
// minutes of retries. Factories opened together each keep theirs.
func TestFactoriesOpenedTogetherKeepTheirCacheDirs(t *testing.T) {
	parent := t.TempDir()
	const workers, rounds = 6, 60
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for r := 0; r < rounds; r++ {
				dir, lock, err := makeCacheDir(parent)
				if err != nil {
					errs <- err
					return
				}
				// Work in the directory while the others open and sweep.
				if err := os.WriteFile(filepath.Join(dir, "meta.db"), []byte("x"), 0o600); err != nil {
					lock.Close()
					errs <- fmt.Errorf("round %d: the factory's own cache directory: %w", r, err)
					return
				}
				os.RemoveAll(dir)
				lock.Close()
			}
			errs <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
