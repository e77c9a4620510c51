package disk

// Durability: Flush and FlushSealed make a batch durable (one syncfs,
// or fsyncs of the directories it dirtied), and the atomic file writes
// every Apply uses.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/specstar/replicator/sink/internal/store"
)

// Flush makes every write applied so far durable (fsync of touched
// directories); the caller acks messages only after Flush returns nil.
// Files are fsynced before they are renamed into place, and SQLite commits
// are durable when they return, so what remains is the queued metas and
// the directory entries.
func (d *Sink) Flush(ctx context.Context) error {
	d.Seal()
	return d.FlushSealed(ctx)
}

// OverlapsFlush reports that this sink can make one batch durable while
// the next is applied (sink.Overlapper): a batch's metas are written and
// its directories synced at its flush, from sets Seal set aside (see
// metaqueue.go for how decisions see metas not yet written).
func (d *Sink) OverlapsFlush() bool { return !d.opts.ReadOnly }

// FlushSealed is Flush for what was applied before the last Seal
// (sink.Overlapper), so that a batch is made durable while the next one
// is being applied. With sync=batch its syncfs covers the next batch's
// writes so far too, which only makes them durable early.
func (d *Sink) FlushSealed(ctx context.Context) error {
	touched, err := d.writeSealedMetas()
	d.mu.Lock()
	for _, dir := range touched {
		d.sealedDirty[dir] = struct{}{}
	}
	dirs := make([]string, 0, len(d.sealedDirty))
	for dir := range d.sealedDirty {
		dirs = append(dirs, dir)
	}
	d.sealedDirty = map[string]struct{}{}
	d.mu.Unlock()
	if err != nil {
		d.markSealedDirty(dirs...)
		return err
	}
	if d.opts.SyncPerBatch && len(dirs) > 0 {
		if err := syncFS(d.root); err != nil {
			d.markSealedDirty(dirs...)
			return err
		}
		return nil
	}
	// Deepest first: a new directory's own entries, then its entry in its
	// parent.
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for i, dir := range dirs {
		if err := ctx.Err(); err != nil {
			d.markSealedDirty(dirs[i:]...)
			return err
		}
		if err := syncDir(dir); err != nil {
			d.markSealedDirty(dirs[i:]...)
			return err
		}
	}
	return nil
}

// markSealedDirty gives directories a failed flush did not make durable
// back to the next one.
func (d *Sink) markSealedDirty(dirs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dir := range dirs {
		d.sealedDirty[dir] = struct{}{}
	}
}

// syncNow fsyncs the given directories at once (and takes them off the
// pending set), for entries that must be durable before a later write.
func (d *Sink) syncNow(dirs ...string) error {
	if d.opts.SyncPerBatch {
		return nil // Flush's syncfs covers them
	}
	d.mu.Lock()
	for _, dir := range dirs {
		delete(d.dirty, dir)
	}
	d.mu.Unlock()
	for i, dir := range dirs {
		if err := syncDir(dir); err != nil {
			d.markDirty(dirs[i:]...)
			return err
		}
	}
	return nil
}

// markDirty records directories whose entries the next flush makes
// durable. With sync=batch one syncfs covers them all, so the root stands
// for every one: what a flush needs is that something changed, and the
// set stays one entry rather than four a revision.
func (d *Sink) markDirty(dirs ...string) {
	if len(dirs) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opts.SyncPerBatch {
		d.dirty[d.root] = struct{}{}
		return
	}
	for _, dir := range dirs {
		d.dirty[dir] = struct{}{}
	}
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since (by someone else): nothing to make durable
	}
	if err != nil {
		return fmt.Errorf("sink: fsync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sink: fsync %s: %w", dir, err)
	}
	return nil
}

// ensureDir creates dir (below the root) and its missing parents, marking
// each parent that gained an entry as dirty; it returns those parents,
// deepest first.
func (d *Sink) ensureDir(dir string) ([]string, error) {
	created, _, err := d.makeDir(dir)
	return created, err
}

// makeDir is ensureDir that also tells whether dir itself was made by
// this call (fresh), so a caller knows nothing was in it. It tries mkdir
// first and looks further only when that fails: one system call for the
// common case of a new directory under an existing one.
func (d *Sink) makeDir(dir string) (created []string, fresh bool, err error) {
	if dir == d.root {
		return nil, false, nil
	}
	err = os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrNotExist) {
		if created, _, err = d.makeDir(filepath.Dir(dir)); err != nil {
			return nil, false, err
		}
		err = os.Mkdir(dir, 0o755)
	}
	switch {
	case err == nil:
		d.markDirty(filepath.Dir(dir))
		return append([]string{filepath.Dir(dir)}, created...), true, nil
	case errors.Is(err, fs.ErrExist):
		if st, serr := os.Stat(dir); serr != nil || !st.IsDir() {
			return nil, false, fmt.Errorf("sink: %s is not a directory", dir)
		}
		return created, false, nil
	}
	return nil, false, fmt.Errorf("sink: %w", err)
}

// writeFileAtomic writes dir/name through a temporary file in the
// staging directory that is fsynced (unless sync=batch) and renamed into
// place, so that no reader and no crash ever sees a partial file.
func (d *Sink) writeFileAtomic(dir, name string, data []byte) error {
	tmp, err := d.stage(func(tmp string) error { return createFile(tmp, data, !d.opts.SyncPerBatch) })
	if err != nil {
		return err
	}
	if err := unix.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sink: rename to %s: %w", filepath.Join(dir, name), err)
	}
	d.markDirty(dir)
	return nil
}

// writeFileNew writes dir/name, which does not exist yet, so that it
// appears complete or not at all without a rename (see linkFile), fsynced
// unless sync=batch; where that cannot be done, or dir/name turns out to
// exist, it falls back to writeFileAtomic.
func (d *Sink) writeFileNew(dir, name string, data []byte) error {
	err := linkFile(dir, name, data, !d.opts.SyncPerBatch)
	if errors.Is(err, errNoTmpfile) || errors.Is(err, fs.ErrExist) {
		return d.writeFileAtomic(dir, name, data)
	}
	if err != nil {
		return err
	}
	d.markDirty(dir)
	return nil
}

// writeFileInPlace writes dir/name directly, for a file no reader can
// reach yet (see ApplyRevision), fsynced unless sync=batch.
func (d *Sink) writeFileInPlace(dir, name string, data []byte) error {
	if err := createFile(filepath.Join(dir, name), data, !d.opts.SyncPerBatch); err != nil {
		return err
	}
	d.markDirty(dir)
	return nil
}

func tmpName() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return store.TmpPrefix + hex.EncodeToString(b[:])
}

// syncFS makes every write to the file system holding root durable
// (syncfs(2)): one call for a whole batch.
func syncFS(root string) error {
	f, err := os.Open(root)
	if err != nil {
		return fmt.Errorf("sink: syncfs %s: %w", root, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sink: syncfs %s: %w", root, err)
	}
	return nil
}
