package s3

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cacheDirPrefix starts the name of each factory's cache directory below
// Options.CacheDir.
const cacheDirPrefix = "specstar-s3factory-"

// cacheLockName is the file in a factory's cache directory that its
// process holds an flock on while the factory is open: the kernel drops it
// when the process dies, so the next factory can tell a killed process's
// directory from a live one's and remove it.
const cacheLockName = ".lock"

// makeCacheDir removes the cache directories below parent ("" = the
// system's temp directory) that killed processes left, then makes a new
// one (mode 0700) and locks it. The caller closes the lock after removing
// the directory.
func makeCacheDir(parent string) (dir string, lock *os.File, err error) {
	if parent == "" {
		parent = os.TempDir()
	}
	sweepCacheDirs(parent)
	dir, err = os.MkdirTemp(parent, cacheDirPrefix)
	if err != nil {
		return "", nil, fmt.Errorf("cache directory in %s: %w", parent, err)
	}
	// The lock file gets its name only once it is locked: a factory
	// sweeping at the same moment must never find it unlocked and take
	// this live directory for a killed one's.
	unnamed := filepath.Join(dir, cacheLockName+".new")
	lock, err = os.OpenFile(unnamed, os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			err = os.Rename(unnamed, filepath.Join(dir, cacheLockName))
		}
		if err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("cache directory %s: lock: %w", dir, err)
	}
	return dir, lock, nil
}

// sweepCacheDirs removes parent's factory cache directories that this
// user owns and no live process holds: their lock is free, or they have
// none and are over an hour old (a process killed between making the
// directory and locking it, or from before these locks).
func sweepCacheDirs(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), cacheDirPrefix) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		st, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Getuid() {
			continue // another user's: not ours to judge
		}
		if cacheDirStale(p, st.ModTime()) {
			_ = os.RemoveAll(p)
		}
	}
}

// cacheDirStale reports whether no live factory holds dir's lock.
func cacheDirStale(dir string, mtime time.Time) bool {
	f, err := os.OpenFile(filepath.Join(dir, cacheLockName), os.O_RDWR, 0)
	if err != nil {
		return time.Since(mtime) > time.Hour
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return true
}
