// Package disk is the sink backend for a SpecStar disk deployment: it
// materializes records (metas, revisions, blobs) idempotently and
// independent of arrival order, byte-identical to what SpecStar's own
// stores write, reads them back, lists and purges them, and parses the
// disk:/path sink URL. It also reads a bare DiskBlobStore directory.
//
// Sink writes the layout of SpecStar's DiskStorageFactory and DiskBlobStore
// (optionally with FileSqliteMetaStore metas):
//
//	{root}/{model}/meta/{resource_id}.data                         ResourceMeta (DiskMetaStore)
//	{root}/{model}/meta.db                                         resource_meta table (FileSqliteMetaStore, option)
//	{root}/{model}/data/store/{uid}/data                           payload bytes, unchanged
//	{root}/{model}/data/store/{uid}/info                           RevisionInfo
//	{root}/{model}/data/resource/{resource_id}/{revision_id}/{p_sv}/uid   index entry (or, as an option, a symlink {p_sv} -> ../../../store/{uid})
//	{root}/_blobs/{file_id with "/" and ".." mapped to "_"}        msgpack Binary{file_id,size,[content_type],data}
package disk

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Options choose the encoding and the variant of the layout a Disk
// writes, so that it matches the SpecStar deployment that will open it.
type Options struct {
	Encoding   events.Encoding // encoding of meta and info files (events.JSON default, as SpecStar's disk factory)
	SQLiteMeta bool            // metas in {root}/{model}/meta.db instead of .data files
	// DetectMeta, with ReadOnly, reads each model's metas from meta.db or
	// meta/*.data, whichever the tree holds (a disk URL without meta=).
	DetectMeta   bool
	SymlinkIndex bool   // write the older symlinked index form
	OnDuplicate  string // "" = newer meta wins (default); "overwrite", "skip", "raise_error" = SpecStar's archive-restore semantics
	// SyncPerBatch trades power-loss atomicity for speed: files are not
	// fsynced one by one; Flush makes everything durable with one syncfs.
	// A process crash still leaves no partial file; a power loss may leave
	// files of the last unflushed (so unacknowledged) batch empty or
	// partial until their redelivered events rewrite them.
	SyncPerBatch bool
	// ReadOnly opens the sink for reading back only (verify, reconcile):
	// the root must exist, nothing is created, swept or written, and every
	// Apply is an error.
	ReadOnly bool
}

// Sink is a sink writing a SpecStar disk deployment under one root
// directory. It is safe for concurrent use; writes to one resource are
// serialized. Another process writing the same resources at the same time
// (SpecStar itself) is only coordinated with in SQLite mode.
type Sink struct {
	root string
	opts Options

	locks store.KeyLocks

	mu     sync.Mutex
	closed bool
	dirty  map[string]struct{} // directories with entries not yet fsynced
	// sealedDirty holds those of a sealed batch (sink.Overlapper), which
	// FlushSealed syncs.
	sealedDirty map[string]struct{}
	// metaQueue holds each resource's newest meta decided since the last
	// Seal or Flush, by model + "\x00" + resource id, sealedMetas those
	// decided before it and not written yet (see metaqueue.go).
	metaQueue   map[string]*queuedMeta
	sealedMetas map[string]*queuedMeta
	skipped     map[string]map[string]struct{} // OnDuplicate "skip": model -> resource ids whose meta was skipped
	dbs         map[string]*sql.DB             // SQLite meta stores opened for writing, per model
	roDBs       map[string]*sql.DB             // SQLite meta stores opened read-only, per model
	tmpDir      string                         // this writer's staging directory
	tmpMade     bool
	tmpLock     *os.File // holds the flock on tmpDir's lock file while the staging directory is in use
	// writerLock holds the flock on the root's WriterLockName while the
	// sink is open for writing.
	writerLock *os.File
	// rootLock holds the flock on the root directory itself, which
	// survives the deletion of writerLock's file.
	rootLock *os.File
}

// Open opens a sink rooted at root (creating the directory if needed),
// the one way to get a Disk. Nothing below root is created or changed
// until a record is applied, except the writer lock in the staging
// directory (WriterLockName): a root another open writer holds is refused
// with a *WriterLockedError.
func Open(ctx context.Context, root string, opts Options) (*Sink, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch opts.Encoding {
	case events.JSON, events.Msgpack:
	default:
		return nil, fmt.Errorf("sink: unknown encoding %v", opts.Encoding)
	}
	switch opts.OnDuplicate {
	case store.DupNewer, store.DupOverwrite, store.DupSkip, store.DupRaise:
	default:
		return nil, fmt.Errorf("sink: unknown on-duplicate strategy %q (want \"\", %q, %q or %q)",
			opts.OnDuplicate, store.DupOverwrite, store.DupSkip, store.DupRaise)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("sink: root %s: %w", root, err)
	}
	d := &Sink{
		root:        abs,
		opts:        opts,
		dirty:       map[string]struct{}{},
		sealedDirty: map[string]struct{}{},
		metaQueue:   map[string]*queuedMeta{},
		sealedMetas: map[string]*queuedMeta{},
		skipped:     map[string]map[string]struct{}{},
		dbs:         map[string]*sql.DB{},
		roDBs:       map[string]*sql.DB{},
	}
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) && !opts.ReadOnly {
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, fmt.Errorf("sink: create root: %w", err)
		}
		d.markDirty(filepath.Dir(abs))
	} else if err != nil {
		return nil, fmt.Errorf("sink: root: %w", err)
	}
	if st, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("sink: root: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("sink: root %s is not a directory", abs)
	}
	if opts.ReadOnly {
		return d, nil // a reader leaves the staging directories alone
	}
	if d.rootLock, err = takeRootLock(abs); err != nil {
		return nil, err
	}
	if d.writerLock, err = takeWriterLock(abs); err != nil {
		d.rootLock.Close()
		return nil, err
	}
	d.tmpDir = filepath.Join(abs, store.StagingDir, stagingID())
	sweepStaging(filepath.Join(abs, store.StagingDir))
	return d, nil
}

// The staging directory ({root}/.specstar-tmp, store.StagingDir) holds the
// temporary files of writes in progress below the root and so on the same
// file system (a rename from it into place is atomic); SpecStar opens only
// its model directories and _blobs, so it never sees it. Each writer (each
// open Sink) has its own subdirectory {id} and holds an flock on the file
// {id}.lock beside it for as long as it may use it, so whether a writer is
// alive is told by its lock, which works across PID namespaces (sidecars,
// Jobs sharing the volume) and on NFS, where a process id means nothing.

// Root is the absolute path of the sink's root directory, for logs and
// verification tools.
func (d *Sink) Root() string { return d.root }

func (d *Sink) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("sink: disk is closed")
	}
	return nil
}

// checkWrite is check for the methods that change the store: a sink
// opened read-only refuses them.
func (d *Sink) checkWrite(ctx context.Context) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	if d.opts.ReadOnly {
		return fmt.Errorf("sink: disk %s is open read-only", d.root)
	}
	return nil
}

// ---------------------------------------------------------------- metas

// ApplyMeta materializes one resource's ResourceMeta, idempotently. By
// default a meta replaces an existing one only if it is newer
// (UpdatedTime.Instant(), then TotalRevisionCount, then, for two different
// metas that tie on both, the greater encoding, so the result never
// depends on arrival order); an identical one is Unchanged and an older
// one Stale. OnDuplicate applies
// SpecStar's restore rules instead; a meta identical to the stored one is
// never a duplicate, so redelivery stays a no-op in every mode.
func (d *Sink) ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error) {
	if err := d.checkWrite(ctx); err != nil {
		return 0, err
	}
	if meta == nil {
		return 0, store.Invalid("meta", "nil")
	}
	if err := store.CheckModel(model); err != nil {
		return 0, err
	}
	if err := store.CheckResourceID(meta.ResourceID); err != nil {
		return 0, err
	}
	encoded, err := meta.Encode(d.opts.Encoding)
	if err != nil {
		return 0, store.Invalidf(fmt.Sprintf("meta %q", meta.ResourceID), "cannot be encoded in %v: %v", d.opts.Encoding, err)
	}
	key := model + "\x00" + meta.ResourceID
	unlock := d.locks.Lock(key)
	defer unlock()
	if d.opts.SQLiteMeta {
		return d.applyMetaSQLite(ctx, model, meta, encoded)
	}
	dir := filepath.Join(d.root, model, "meta")
	name := meta.ResourceID + store.MetaSuffix
	existing, onDisk, err := d.currentMeta(key, dir, name)
	if err != nil {
		return 0, err
	}
	out, err := d.decideMeta(model, meta, encoded, existing, filepath.Join(dir, name))
	if err != nil || out != store.Written {
		return out, err
	}
	// Written at Flush, once per resource and batch (metaqueue.go).
	d.queueMeta(key, &queuedMeta{dir: dir, name: name, encoded: encoded, onDisk: onDisk})
	return store.Written, nil
}

// decideMeta says whether an incoming meta (encoded in the sink encoding)
// is to be written over existing (nil if there is none), following the
// OnDuplicate rules. where names the stored meta in errors.
func (d *Sink) decideMeta(model string, meta *events.ResourceMeta, encoded, existing []byte, where string) (store.Outcome, error) {
	if existing == nil {
		return store.Written, nil
	}
	if bytes.Equal(existing, encoded) {
		return store.Unchanged, nil
	}
	switch d.opts.OnDuplicate {
	case store.DupOverwrite:
		return store.Written, nil
	case store.DupSkip:
		d.markSkipped(model, meta.ResourceID)
		return store.Skipped, nil
	case store.DupRaise:
		return 0, store.Invalid(fmt.Sprintf("meta %q", meta.ResourceID), "a different meta already exists (on_duplicate=raise_error)")
	}
	old, err := events.DecodeResourceMeta(d.opts.Encoding, existing)
	if err != nil {
		// A stored meta that does not decode is a broken entry (no SpecStar
		// reader could use it, e.g. cut short by a power loss): replace it.
		return store.Written, nil
	}
	if store.CompareMeta(meta, encoded, old, existing) > 0 {
		return store.Written, nil
	}
	return store.Stale, nil
}

// markSkipped remembers, for the lifetime of this Disk (one restore run),
// that OnDuplicate "skip" left this resource's meta alone, so that its
// revisions arriving later are skipped too, as SpecStar's loader does.
func (d *Sink) markSkipped(model, resourceID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.skipped[model]
	if m == nil {
		m = map[string]struct{}{}
		d.skipped[model] = m
	}
	m[resourceID] = struct{}{}
}

func (d *Sink) isSkipped(model, resourceID string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.skipped[model][resourceID]
	return ok
}

// Close flushes and releases the SQLite handles, so a replicator can shut
// down cleanly. The Disk cannot be used afterwards.
func (d *Sink) Close() error {
	err := d.Flush(context.Background())
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return err
	}
	d.closed = true
	if d.tmpLock != nil {
		// Empty unless a write failed half-way, and nobody else uses it:
		// leave no trace. The lock goes last, released by the Close.
		if os.RemoveAll(d.tmpDir) == nil && stillLinked(d.tmpLock, d.tmpDir+lockSuffix) {
			_ = os.Remove(d.tmpDir + lockSuffix)
		}
		d.tmpLock.Close()
		d.tmpLock = nil
	}
	if d.writerLock != nil {
		releaseWriterLock(d.writerLock) // after this writer's staging: it guards it too
		d.writerLock = nil
		_ = os.Remove(filepath.Dir(d.tmpDir)) // only if no other writer's is there
	}
	if d.rootLock != nil {
		d.rootLock.Close() // the last lock released
		d.rootLock = nil
	}
	for _, m := range []map[string]*sql.DB{d.dbs, d.roDBs} {
		for model, db := range m {
			if cerr := db.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("sink: close meta store of %s: %w", model, cerr))
			}
		}
	}
	return err
}
