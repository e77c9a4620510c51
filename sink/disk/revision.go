package disk

// ApplyRevision: a revision's data file, content-addressed by uid, and
// the index slot that links its (revision, schema version) to it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

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
