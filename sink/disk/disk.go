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
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/specstar/replicator/dedup"
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

// ------------------------------------------------------------- revisions

// ApplyRevision materializes one revision, idempotently: store/{uid}/data,
// store/{uid}/info and the index entry of (resource_id, revision_id,
// schema_version), in that order, so that an index entry never points at
// a missing store directory.
//
// A revision already stored identically is Unchanged. When the uid is
// stored with different content, the newer one stays: a migration
// (parent_schema_version names the other's schema_version) is newer than
// what it migrated, otherwise the later updated_time wins. The same rule
// picks between two uids claiming one index slot (a draft modified in
// place gets a new uid); the loser is Stale and nothing of it is written.
// SpecStar's migrate() keeps the uid, so after a migration the v_v1 and
// v_v2 entries both point at one store directory holding the v2 version.
// A uid stored for another resource is refused (store.CheckUIDHolder).
func (d *Sink) ApplyRevision(ctx context.Context, model string, res *events.RawResource) (store.Outcome, error) {
	if err := d.checkWrite(ctx); err != nil {
		return 0, err
	}
	if res == nil {
		return 0, store.Invalid("revision", "nil")
	}
	info := &res.Info
	if err := store.CheckRevisionInfo(model, info); err != nil {
		return 0, err
	}
	if d.opts.OnDuplicate == store.DupSkip && d.isSkipped(model, info.ResourceID) {
		return store.Skipped, nil
	}
	infoBytes, err := info.Encode(d.opts.Encoding)
	if err != nil {
		return 0, store.Invalidf(fmt.Sprintf("revision %q", info.UID), "info cannot be encoded in %v: %v", d.opts.Encoding, err)
	}
	unlock := d.locks.Lock(model + "\x00" + info.ResourceID)
	defer unlock()
	// The uid is locked too (always after the resource, so no two calls
	// wait on each other): two resources claiming one uid are decided one
	// after the other, the second refused.
	unlockUID := d.locks.Lock(model + "\x00uid\x00" + info.UID)
	defer unlockUID()

	dataDir := filepath.Join(d.root, model, "data")
	held, _, err := d.readStoredInfo(dataDir, info.UID)
	if err != nil {
		return 0, err
	}
	if err := store.CheckUIDHolder(info, held); err != nil {
		return 0, err
	}
	revDir := filepath.Join(dataDir, "resource", info.ResourceID, info.RevisionID)
	slot := filepath.Join(revDir, store.SchemaDir(info.SchemaVersion))
	// The revision's directory is made first: one made by this call holds
	// no index entry, so there is nothing to read (an empty one left by a
	// crash is no entry either).
	_, revFresh, err := d.makeDir(revDir)
	if err != nil {
		return 0, err
	}
	var cur slotState
	if !revFresh {
		if cur, err = readSlot(slot); err != nil {
			return 0, err
		}
	}
	if cur.uid != "" && cur.uid != info.UID {
		other, otherBytes, err := d.readStoredInfo(dataDir, cur.uid)
		if err != nil {
			return 0, err
		}
		if other != nil && !store.Supersedes(info, infoBytes, other, otherBytes) {
			return store.Stale, nil
		}
	}

	storeDir := filepath.Join(dataDir, "store", info.UID)
	writeData, writeInfo, storeNewer := true, true, false
	// Making the store directory first tells whether anything can be in
	// it: a directory this call made is empty, so nothing is read back.
	created, fresh, err := d.makeDir(storeDir)
	if err != nil {
		return 0, err
	}
	var oldInfo []byte
	if !fresh {
		oldInfo, err = os.ReadFile(filepath.Join(storeDir, "info"))
	} else {
		err = fs.ErrNotExist
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, fmt.Errorf("sink: read revision info: %w", err)
	case bytes.Equal(oldInfo, infoBytes):
		writeInfo = false
		oldData, err := os.ReadFile(filepath.Join(storeDir, "data"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("sink: read revision data: %w", err)
		}
		writeData = err != nil || !bytes.Equal(oldData, res.RawData)
	default:
		// A stored info that does not decode is a broken store entry (no
		// SpecStar reader could use it): it is replaced.
		if old, derr := events.DecodeRevisionInfo(d.opts.Encoding, oldInfo); derr == nil && !store.Supersedes(info, infoBytes, old, oldInfo) {
			writeData, writeInfo, storeNewer = false, false, true
		}
	}
	wrote := false
	if writeData || writeInfo {
		// In a store directory this call made, no index entry points yet,
		// so no reader can open its files: they are written in place
		// (with sync=file each is fsynced, and the directory too, before
		// the index entry is made; with sync=batch the syncfs before the
		// ack makes them durable). A crash before the index entry leaves
		// the batch unacked, and its redelivery finds the directory,
		// compares and repairs. Otherwise each file is replaced
		// atomically.
		write := d.writeFileAtomic
		if fresh {
			write = d.writeFileInPlace
		}
		if writeData {
			if err := write(storeDir, "data", res.RawData); err != nil {
				return 0, err
			}
		}
		if writeInfo {
			if err := write(storeDir, "info", infoBytes); err != nil {
				return 0, err
			}
		}
		// The store entries must be durable before a new index entry can
		// point at them, whatever order a crash persists renames in.
		if cur.uid != info.UID {
			if err := d.syncNow(append([]string{storeDir}, created...)...); err != nil {
				return 0, err
			}
		}
		wrote = true
	}
	if cur.uid != info.UID {
		if err := d.writeSlot(slot, cur, info.UID); err != nil {
			return 0, err
		}
		wrote = true
	}
	switch {
	case wrote:
		return store.Written, nil
	case storeNewer:
		return store.Stale, nil
	}
	return store.Unchanged, nil
}

// readStoredInfo reads store/{uid}/info; a missing or undecodable one gives
// nil without error.
func (d *Sink) readStoredInfo(dataDir, uid string) (*events.RevisionInfo, []byte, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "store", uid, "info"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sink: read revision info: %w", err)
	}
	info, err := events.DecodeRevisionInfo(d.opts.Encoding, b)
	if err != nil {
		return nil, nil, nil
	}
	return info, b, nil
}

// slotForm is the shape an index entry has on disk.
type slotForm int

const (
	slotNone slotForm = iota // absent
	slotLink                 // symlink to ../../../store/{uid} (older form), or a file holding that target
	slotDir                  // directory holding a text file uid (contract form)
)

// slotState is an index entry as found: its form and the uid it names
// ("" if absent or unusable, e.g. a directory whose uid file is missing).
type slotState struct {
	form    slotForm
	uid     string
	missing bool // a directory without its uid file (a crash while it was made)
}

// readSlot reads an index entry in either form.
func readSlot(slot string) (slotState, error) {
	fi, err := os.Lstat(slot)
	if errors.Is(err, fs.ErrNotExist) {
		return slotState{}, nil
	}
	if err != nil {
		return slotState{}, fmt.Errorf("sink: index entry: %w", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(slot)
		if err != nil {
			return slotState{}, fmt.Errorf("sink: index entry: %w", err)
		}
		uid, ok := linkTargetUID(target)
		if !ok {
			uid = ""
		}
		return slotState{form: slotLink, uid: uid}, nil
	case fi.IsDir():
		b, err := os.ReadFile(filepath.Join(slot, "uid"))
		if errors.Is(err, fs.ErrNotExist) {
			return slotState{form: slotDir, missing: true}, nil
		}
		if err != nil {
			return slotState{}, fmt.Errorf("sink: index entry: %w", err)
		}
		uid := string(bytes.TrimSpace(b))
		if !store.CanonicalUUID(uid) {
			uid = ""
		}
		return slotState{form: slotDir, uid: uid}, nil
	case fi.Mode().IsRegular() && fi.Size() <= maxLinkFile:
		// A symlink flattened into a file holding its target, as copies
		// that do not keep symlinks leave it (the shared fixture trees
		// are such a copy).
		b, err := os.ReadFile(slot)
		if err != nil {
			return slotState{}, fmt.Errorf("sink: index entry: %w", err)
		}
		if uid, ok := linkTargetUID(string(bytes.TrimSpace(b))); ok {
			return slotState{form: slotLink, uid: uid}, nil
		}
	}
	return slotState{}, fmt.Errorf("sink: index entry %s is neither a directory nor a symlink to a store directory", slot)
}

// maxLinkFile bounds a flattened symlink's size.
const maxLinkFile = 4096

// linkTargetUID reads the uid out of an index symlink's target,
// "../../../store/{uid}" (or any path ending in store/{uid}).
func linkTargetUID(target string) (string, bool) {
	if target == "" {
		return "", false
	}
	target = filepath.Clean(target)
	uid := filepath.Base(target)
	return uid, filepath.Base(filepath.Dir(target)) == "store" && store.CanonicalUUID(uid)
}

// writeSlot points an index entry at uid; its parent directory exists. A
// new entry takes the configured form and is made in place: a symlink
// appears whole, and a directory gets its uid file linked in complete (a
// crash in between leaves a directory without a uid, which no reader
// takes for an entry and the redelivery completes). An existing entry
// keeps its form, so the change is one atomic rename.
func (d *Sink) writeSlot(slot string, cur slotState, uid string) error {
	parent := filepath.Dir(slot)
	target := filepath.Join("..", "..", "..", "store", uid)
	switch {
	case cur.form == slotDir:
		if cur.missing {
			return d.writeFileNew(slot, "uid", []byte(uid))
		}
		return d.writeFileAtomic(slot, "uid", []byte(uid))
	case cur.form == slotNone && d.opts.SymlinkIndex:
		if err := os.Symlink(target, slot); err != nil {
			return fmt.Errorf("sink: index entry: %w", err)
		}
		d.markDirty(parent)
		return nil
	case cur.form == slotLink:
		tmp, err := d.stage(func(tmp string) error { return os.Symlink(target, tmp) })
		if err != nil {
			return fmt.Errorf("sink: index entry: %w", err)
		}
		if err := os.Rename(tmp, slot); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("sink: index entry: %w", err)
		}
		d.markDirty(parent)
		return nil
	}
	if err := os.Mkdir(slot, 0o755); err != nil {
		return fmt.Errorf("sink: index entry: %w", err)
	}
	d.markDirty(parent)
	return d.writeFileNew(slot, "uid", []byte(uid))
}

// ----------------------------------------------------------------- blobs

// binSuffix ends an encoded Binary whose data is empty: the "data" key and
// an empty bin8.
const binSuffix = "\xa4data\xc4\x00"

// blobHeader is the encoding of Binary{file_id, size, content_type?, data}
// up to and including the bin header of data, exactly as Binary.Encode
// writes it for data of the declared size.
func blobHeader(fileID string, size int64, contentType string) ([]byte, error) {
	b := events.Binary{
		FileID: events.Some(fileID),
		Size:   events.Some(size),
		Data:   events.Some([]byte{}),
	}
	if contentType != "" {
		b.ContentType = events.Some(contentType)
	}
	enc, err := b.Encode(events.Msgpack)
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(enc, []byte(binSuffix)) {
		return nil, fmt.Errorf("sink: unexpected Binary encoding % x", enc)
	}
	hdr := enc[:len(enc)-2]
	switch {
	case size <= math.MaxUint8:
		hdr = append(hdr, 0xc4, byte(size))
	case size <= math.MaxUint16:
		hdr = append(hdr, 0xc5)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(size))
	default:
		hdr = append(hdr, 0xc6)
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(size))
	}
	return hdr, nil
}

// copyBufSize is the one buffer a blob is streamed through.
const copyBufSize = 128 << 10

// ApplyBlob materializes one blob without holding it in memory: the Binary
// header, then the data copied from data while it is hashed. The file
// appears (by rename) only if exactly size bytes were read and they hash
// to fileID; otherwise nothing is left behind and the error is an
// *InvalidError. An existing blob file is
// Unchanged (blobs are content-addressed and written once) and data is not
// read. Memory use does not depend on size.
func (d *Sink) ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (store.Outcome, error) {
	if err := d.checkWrite(ctx); err != nil {
		return 0, err
	}
	name, err := store.CheckFileID(fileID)
	if err != nil {
		return 0, err
	}
	key := fmt.Sprintf("blob %q", fileID)
	if size < 0 {
		return 0, store.Invalidf(key, "negative size %d", size)
	}
	if size > math.MaxUint32 {
		return 0, store.Invalidf(key, "size %d exceeds what a msgpack bin can hold", size)
	}
	dir := filepath.Join(d.root, store.BlobsDir)
	path := filepath.Join(dir, name)
	unlock := d.locks.Lock("\x00blob\x00" + name)
	defer unlock()
	hdr, err := blobHeader(fileID, size, contentType)
	if err != nil {
		return 0, store.Invalidf(key, "cannot be encoded: %v", err)
	}
	if st, err := os.Lstat(path); err == nil {
		// Content-addressed: written once. A file of the wrong length can
		// only be a write cut short by a power loss: rewrite it.
		if !d.opts.SyncPerBatch || st.Size() == int64(len(hdr))+size {
			return store.Unchanged, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("sink: blob: %w", err)
	}
	if _, err := d.ensureDir(dir); err != nil {
		return 0, err
	}
	var f *os.File
	tmp, err := d.stage(func(tmp string) (err error) {
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sink: blob %s: %w", fileID, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 64<<10)
	if _, err := bw.Write(hdr); err != nil {
		return 0, fmt.Errorf("sink: blob %s: %w", tmp, err)
	}
	h := dedup.NewFileIDHasher()
	src := io.LimitReader(store.CtxReader{Ctx: ctx, R: data}, size+1)
	n, err := io.CopyBuffer(io.MultiWriter(bw, h), src, make([]byte, copyBufSize))
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("sink: blob %s: %w", fileID, err)
	}
	if n != size {
		if n > size {
			return 0, store.Invalidf(key, "more than the declared %d bytes", size)
		}
		return 0, store.Invalidf(key, "%d bytes but the declared size is %d", n, size)
	}
	if got := dedup.HexSum(h); got != fileID {
		return 0, store.Invalidf(key, "bytes hash to %s", got)
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("sink: blob %s: %w", tmp, err)
	}
	if !d.opts.SyncPerBatch {
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("sink: blob %s: %w", tmp, err)
		}
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("sink: blob %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, fmt.Errorf("sink: blob: %w", err)
	}
	ok = true
	d.markDirty(dir)
	return store.Written, nil
}

// --------------------------------------------------- durability and files

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
