package disk

// The staging directory: where files are written before they are linked
// into the tree, swept of what a crashed writer left.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockSuffix ends the lock file of a writer's staging directory.
const lockSuffix = ".lock"

// stagingID names a writer's staging directory: the process id, for
// people, and random bytes, so two writers never share one.
func stagingID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// tmpPath returns a fresh temporary name in this writer's staging
// directory, creating the directory (and taking its lock) on first use,
// or again when restage is set (the directory went missing under us).
func (d *Sink) tmpPath(restage bool) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opts.ReadOnly {
		return "", fmt.Errorf("sink: disk %s is open read-only", d.root)
	}
	if !d.tmpMade || restage {
		if err := d.ensureStaging(); err != nil {
			return "", err
		}
	}
	return filepath.Join(d.tmpDir, tmpName()), nil
}

// stage makes a fresh temporary entry with create (a file, directory or
// symlink at the path it is given) in this writer's staging directory and
// returns its path. When the staging directory was removed under the
// writer (by an older sweeper or by hand), it is recreated, its lock
// retaken, and create tried once more, so a writer never fails for good.
func (d *Sink) stage(create func(tmp string) error) (string, error) {
	for attempt := 0; ; attempt++ {
		tmp, err := d.tmpPath(attempt > 0)
		if err != nil {
			return "", err
		}
		err = create(tmp)
		if err == nil {
			return tmp, nil
		}
		if attempt > 0 || !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
}

// ensureStaging (d.mu held) takes this writer's lock, unless it still
// holds the lock file at its path, and creates its staging directory.
// The lock comes first: a directory without a lock file is an orphan.
func (d *Sink) ensureStaging() error {
	if d.writerLock != nil && !stillLinked(d.writerLock, d.writerLock.Name()) {
		// The staging directory was removed with the tree's writer lock in
		// it: take the lock again (refused if another writer took it since).
		d.writerLock.Close()
		d.writerLock = nil
		f, err := takeWriterLock(d.root)
		if err != nil {
			return err
		}
		d.writerLock = f
	}
	lockPath := d.tmpDir + lockSuffix
	if d.tmpLock != nil && !stillLinked(d.tmpLock, lockPath) {
		d.tmpLock.Close() // its file was removed: the lock no longer protects us
		d.tmpLock = nil
	}
	if d.tmpLock == nil {
		f, err := takeLock(lockPath)
		if err != nil {
			return err
		}
		d.tmpLock = f
	}
	if err := os.MkdirAll(d.tmpDir, 0o755); err != nil {
		return fmt.Errorf("sink: staging directory %s: %w", d.tmpDir, err)
	}
	d.tmpMade = true
	return nil
}

// takeLock creates (if needed) and flocks the lock file at path, making
// sure the file locked is still the one at path (a sweeper may remove it
// between the open and the flock).
func takeLock(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("sink: staging directory %s: %w", filepath.Dir(path), err)
	}
	for range 10 {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("sink: staging lock %s: %w", path, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return nil, fmt.Errorf("sink: staging lock %s: %w", path, err)
		}
		if stillLinked(f, path) {
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("sink: staging lock %s: removed again and again while being taken", path)
}

// stillLinked reports whether f is still the file at path.
func stillLinked(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

// sweepStaging removes what crashed writers left behind: the staging
// directories (and lock files) whose owner's lock can be taken, so no
// writer holds it. A directory without a lock file is an orphan, except
// the pid-named ones of writers from before these locks, which are kept
// while that pid runs.
func sweepStaging(staging string) {
	entries, err := os.ReadDir(staging)
	if err != nil {
		return
	}
	owners := map[string]bool{} // id -> has a lock file
	for _, e := range entries {
		if e.Name() == WriterLockName {
			continue // the tree's writer lock, which the sweeper holds
		}
		if id, ok := strings.CutSuffix(e.Name(), lockSuffix); ok {
			owners[id] = true
		} else if _, seen := owners[e.Name()]; !seen {
			owners[e.Name()] = false
		}
	}
	for id, locked := range owners {
		dir := filepath.Join(staging, id)
		if locked {
			sweepOwner(dir, dir+lockSuffix)
			continue
		}
		if pid, err := strconv.Atoi(id); err == nil && pid != os.Getpid() {
			if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
				continue // an older writer's, in this PID namespace, still running
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// sweepOwner removes a staging directory and its lock file if the lock can
// be taken, holding it meanwhile, so its owner is gone.
func sweepOwner(dir, lockPath string) {
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		return // gone since the listing: someone else swept it
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // a live writer's
	}
	if !stillLinked(f, lockPath) {
		return
	}
	if os.RemoveAll(dir) == nil {
		_ = os.Remove(lockPath)
	}
}
