package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/specstar/replicator/sink/internal/store"
)

// WriterLockName is the file in a disk sink's staging directory
// ({root}/.specstar-tmp) that the tree's one writer holds an flock on
// while it is open: a second writer of the same tree (another `replicator
// run`, a mirror) is refused at once, since two processes on one tree gain
// nothing and would race on its files. The kernel releases the lock when
// the holder dies, so a killed writer never blocks the next one. It lives
// in the staging directory, which SpecStar never opens and listings skip.
const WriterLockName = "writer.lock"

// WriterLockedError is Open's refusal of a root another writer holds.
type WriterLockedError struct {
	Root string // the sink's root
	Lock string // the lock file held
}

func (e *WriterLockedError) Error() string {
	return fmt.Sprintf("sink: disk root %s is being written by another process (it holds the lock %s): one writer per disk tree; stop the other replicator, or give this one another root", e.Root, e.Lock)
}

// takeRootLock flocks the root directory itself, beside its lock file:
// the file can be deleted under a live writer (by hand, or with the
// staging directory), and a second writer would then create and lock a
// new one; the directory cannot be deleted while it holds the tree.
func takeRootLock(root string) (*os.File, error) {
	f, err := os.OpenFile(root, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("sink: writer lock on root %s: %w", root, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &WriterLockedError{Root: root, Lock: filepath.Join(root, store.StagingDir, WriterLockName)} // the same writer holds both
		}
		return nil, fmt.Errorf("sink: writer lock on root %s: %w", root, err)
	}
	return f, nil
}

// takeWriterLock flocks root's writer lock file, creating it if needed,
// and makes sure the file locked is still the one at its path (a writer
// closing removes it).
func takeWriterLock(root string) (*os.File, error) {
	path := filepath.Join(root, store.StagingDir, WriterLockName)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("sink: staging directory %s: %w", filepath.Dir(path), err)
	}
	for range 10 {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("sink: writer lock %s: %w", path, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &WriterLockedError{Root: root, Lock: path}
			}
			return nil, fmt.Errorf("sink: writer lock %s: %w", path, err)
		}
		if stillLinked(f, path) {
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("sink: writer lock %s: removed again and again while being taken", path)
}

// releaseWriterLock removes the lock file while still holding it (so the
// root is left as it was found), then releases it.
func releaseWriterLock(f *os.File) {
	if f == nil {
		return
	}
	if stillLinked(f, f.Name()) {
		_ = os.Remove(f.Name())
	}
	f.Close()
}

// Exclusive reports whether the tree is held for this sink alone (see
// sink.Exclusive): a writer always holds it from Open on, by its writer
// lock; one opened ReadOnly holds nothing.
func (d *Sink) Exclusive(ctx context.Context) error {
	if d.opts.ReadOnly {
		return fmt.Errorf("sink: disk root %s: opened to read back, it holds no writer lock", d.root)
	}
	return d.check(ctx)
}
