package replicate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// DeadLetteredError is a restore into a tree read and thrown away
// (RestoreTree) that dead-lettered events: the state it holds lacks them.
type DeadLetteredError struct {
	Count            int64
	Stream, Consumer string
}

// Error says how many and where to find them.
func (e *DeadLetteredError) Error() string {
	return fmt.Sprintf("%d events of stream %s could not be restored and were dead-lettered, so the archive would lack them (replicator dlq list --consumer %s); nothing was written", e.Count, e.Stream, e.Consumer)
}

// TreeError is RestoreTree failing to make or open its tree, before
// anything was restored: an operational failure, not the stream's.
type TreeError struct{ Err error }

// Error is Err's.
func (e *TreeError) Error() string { return e.Err.Error() }

// Unwrap is Err.
func (e *TreeError) Unwrap() error { return e.Err }

// treePrefix names RestoreTree's temporary trees, and treeLock the lock
// file each holds while its process lives.
const (
	treePrefix = ".specstar-export-"
	treeLock   = ".specstar-export.lock"
)

// Tree is a temporary disk tree RestoreTree made, locked while the
// process that made it lives, so that a later RestoreTree beside it
// removes it once that process was killed before it could.
type Tree struct {
	Dir  string
	lock *os.File
}

// Remove removes the tree and releases its lock.
func (t *Tree) Remove() error {
	err := os.RemoveAll(t.Dir)
	t.lock.Close()
	if err != nil {
		return fmt.Errorf("remove the temporary tree %s: %w", t.Dir, err)
	}
	return nil
}

// RestoreTree restores the stream as of opts' point into a new temporary
// disk tree made beside the path beside (so that what is made of the state
// fits where it goes), for a caller that reads the state and removes the
// tree: `writer export --at`. It returns the tree, to be removed also when
// err is set (nil only when no tree was made), and, as Restore, where the
// restore stopped; a tree it could not make is a *TreeError, a
// dead-lettered event a *DeadLetteredError. Trees beside it that killed
// runs left behind are removed first.
func RestoreTree(ctx context.Context, bus *stream.Bus, beside string, opts RestoreOptions) (tree *Tree, res *RestoreResult, err error) {
	abs, err := filepath.Abs(beside)
	if err != nil {
		return nil, nil, &TreeError{err}
	}
	sweepTrees(filepath.Dir(abs), opts.Logger)
	dir, err := os.MkdirTemp(filepath.Dir(abs), treePrefix)
	if err != nil {
		return nil, nil, &TreeError{fmt.Errorf("a temporary tree beside %s: %w", beside, err)}
	}
	lock, err := os.OpenFile(filepath.Join(dir, treeLock), os.O_CREATE|os.O_RDWR, 0o644)
	if err == nil {
		if err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, &TreeError{fmt.Errorf("lock the temporary tree %s: %w", dir, err)}
	}
	tree = &Tree{Dir: dir, lock: lock}
	spec, err := sink.Parse("disk:" + dir)
	if err != nil {
		return tree, nil, &TreeError{err}
	}
	spec.SyncPerBatchUnlessSet() // a tree thrown away afterwards: one syncfs a batch is plenty
	snk, err := spec.Open(ctx)
	if err != nil {
		return tree, nil, &TreeError{err}
	}
	res, err = Restore(ctx, bus, snk, opts)
	if cerr := snk.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close the temporary tree %s: %w", dir, cerr)
	}
	if err == nil && res.DeadLettered > 0 {
		return tree, nil, &DeadLetteredError{Count: res.DeadLettered, Stream: bus.Config().Stream, Consumer: res.Consumer}
	}
	return tree, res, err
}

// sweepTrees removes the temporary trees in parent that no process holds:
// their lock can be taken, or they have none and are an hour old (made by
// a version before the locks, or killed between making and locking).
func sweepTrees(parent string, log *slog.Logger) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), treePrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, treeLock), os.O_RDWR, 0)
		if err != nil {
			info, serr := e.Info()
			if !errors.Is(err, fs.ErrNotExist) || serr != nil || time.Since(info.ModTime()) < time.Hour {
				continue
			}
		} else {
			locked := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
			if locked {
				f.Close()
				continue // a live export's
			}
		}
		err = os.RemoveAll(dir)
		if f != nil {
			f.Close()
		}
		if log != nil {
			if err != nil {
				log.Warn("could not remove a temporary tree a killed export left", "dir", dir, "err", err)
			} else {
				log.Info("removed a temporary tree a killed export left", "dir", dir)
			}
		}
	}
}
