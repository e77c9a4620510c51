package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sqlitemeta"
	"github.com/specstar/replicator/sink/internal/store"
)

// purgeGraveyardPrefix names, inside {model}/data, the directory where the
// index entries of a purge in progress wait until their store directories
// are gone. SpecStar opens data/store and data/resource by name only, so it
// never sees it; a crashed purge leaves the list of store directories it
// still has to remove there, and the next purge of that resource finishes
// the job.
const purgeGraveyardPrefix = store.TmpPrefix + "purge-"

// ApplyPurge removes a permanently deleted resource: its meta (.data file
// or meta.db row), then its index entries, then the store directories they
// named, so that no reader ever sees a meta whose revisions are gone or an
// index entry naming a missing store directory.
//
// A stored meta updated after purgedAt (instants, naive read as UTC) means
// the resource was re-created after the purge: Stale, nothing is removed.
// Otherwise the meta goes, and so does every index entry whose revision
// was last updated at or before purgedAt (a revision updated later can only
// belong to a re-creation whose meta has not arrived yet, and stays; with
// the meta removed, in practice that is every entry). Nothing to remove is
// Unchanged; anything removed is Written. Removals are durable at Flush,
// and a purge repeated after a crash half-way completes the job.
//
// Known limit: no tombstone is kept, so an old meta or revision event
// redelivered after the purge (at-least-once delivery) re-creates what it
// carries; a later redelivery of the purge removes it again.
func (d *Sink) ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	if err := d.checkWrite(ctx); err != nil {
		return 0, err
	}
	if err := store.CheckModel(model); err != nil {
		return 0, err
	}
	if err := store.CheckResourceID(resourceID); err != nil {
		return 0, err
	}
	unlock := d.locks.Lock(model + "\x00" + resourceID)
	defer unlock()

	dataDir := filepath.Join(d.root, model, "data")
	grave := graveyardPath(dataDir, resourceID)
	removed := false
	// A purge of this resource that crashed half-way: finish it first.
	if done, err := d.buryGraveyard(dataDir, grave, resourceID); err != nil {
		return 0, err
	} else if done {
		removed = true
	}

	out, err := d.purgeMeta(ctx, model, resourceID, purgedAt)
	if err != nil {
		return 0, err
	}
	if out == store.Stale {
		return store.Stale, nil
	}
	removed = removed || out == store.Written

	n, err := d.purgeIndex(dataDir, grave, resourceID, purgedAt)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		removed = true
		if _, err := d.buryGraveyard(dataDir, grave, resourceID); err != nil {
			return 0, err
		}
	}
	if removed {
		return store.Written, nil
	}
	return store.Unchanged, nil
}

// purgeMeta removes the stored meta unless it was updated after purgedAt
// (Stale). Written if it removed one, Unchanged if there was none. The
// removal is durable when it returns, before any index entry goes.
func (d *Sink) purgeMeta(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	if d.opts.SQLiteMeta {
		return d.purgeMetaSQLite(ctx, model, resourceID, purgedAt)
	}
	dir := filepath.Join(d.root, model, "meta")
	path := filepath.Join(dir, resourceID+store.MetaSuffix)
	// A meta decided but not written yet (queued, or sealed and waiting
	// for its flush) decides as if it were, and goes unwritten if the
	// purge removes it.
	dropped := false
	if q, _ := d.queuedMetaOf(model + "\x00" + resourceID); q != nil {
		if newerThanPurge(d.opts.Encoding, q.encoded, purgedAt) {
			return store.Stale, nil
		}
		d.dropQueuedMeta(model + "\x00" + resourceID)
		dropped = true
	}
	existing, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if dropped {
			return store.Written, nil
		}
		return store.Unchanged, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sink: purge: read meta %s: %w", path, err)
	}
	if !dropped && newerThanPurge(d.opts.Encoding, existing, purgedAt) {
		return store.Stale, nil // (a dropped meta replaced this one: it decided)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("sink: purge: remove meta %s: %w", path, err)
	}
	d.markDirty(dir)
	if err := d.syncNow(dir); err != nil {
		return 0, fmt.Errorf("sink: purge: meta %q: %w", resourceID, err)
	}
	return store.Written, nil
}

// graveyardPath is the graveyard of one resource's purge.
func graveyardPath(dataDir, resourceID string) string {
	return filepath.Join(dataDir, fmt.Sprintf("%s%x", purgeGraveyardPrefix, xxh3.HashString128(resourceID).Bytes()))
}

// newerThanPurge says whether an encoded meta was updated after purgedAt.
// A meta that does not decode is a broken entry and counts as older.
func newerThanPurge(enc events.Encoding, encoded []byte, purgedAt events.Time) bool {
	m, err := events.DecodeResourceMeta(enc, encoded)
	return err == nil && m.UpdatedTime.Instant().After(purgedAt.Instant())
}

// purgeMetaSQLite is purgeMeta for FileSqliteMetaStore: the decision and a
// compare-and-swap DELETE (on the data decided on) in one IMMEDIATE
// transaction, durable at commit.
func (d *Sink) purgeMetaSQLite(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	if _, err := os.Stat(filepath.Join(d.root, model, "meta.db")); errors.Is(err, fs.ErrNotExist) {
		return store.Unchanged, nil // do not create a meta store just to find it empty
	}
	db, path, err := d.metaDB(ctx, model, true)
	if err != nil {
		return 0, err
	}
	return sqlitemeta.Delete(ctx, db, path, resourceID, func(existing []byte) bool {
		return newerThanPurge(d.opts.Encoding, existing, purgedAt)
	})
}

// purgeIndex moves the resource's index entries last updated at or before
// purgedAt into the graveyard (one rename each, so an entry is either in
// the index or in the graveyard), removes the revision and resource
// directories left empty, and makes all of it durable before returning, so
// that no store directory is removed while an entry could still name it.
// It returns the number of entries moved.
func (d *Sink) purgeIndex(dataDir, grave, resourceID string, purgedAt events.Time) (int, error) {
	resDir := filepath.Join(dataDir, "resource", resourceID)
	revs, err := os.ReadDir(resDir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sink: purge %q: %w", resourceID, err)
	}
	moved := 0
	touched := []string{}
	for _, rev := range revs {
		revDir := filepath.Join(resDir, rev.Name())
		if !rev.IsDir() {
			continue // not SpecStar's; left alone
		}
		slots, err := os.ReadDir(revDir)
		if err != nil {
			return moved, fmt.Errorf("sink: purge %q: %w", resourceID, err)
		}
		kept := 0
		for _, s := range slots {
			slot := filepath.Join(revDir, s.Name())
			st, err := readSlot(slot)
			if err != nil {
				kept++
				continue // not an index entry; left alone
			}
			if st.uid != "" {
				info, _, err := d.readStoredInfo(dataDir, st.uid)
				if err != nil {
					return moved, err
				}
				if info != nil && info.ResourceID == resourceID && info.UpdatedTime.Instant().After(purgedAt.Instant()) {
					kept++ // a re-creation's revision
					continue
				}
			}
			if moved == 0 {
				if err := d.makeGraveyard(dataDir, grave); err != nil {
					return 0, err
				}
			}
			name := fmt.Sprintf("%x", xxh3.HashString128(rev.Name()+"\x00"+s.Name()).Bytes())
			if err := os.Rename(slot, filepath.Join(grave, name)); err != nil {
				return moved, fmt.Errorf("sink: purge %q: index entry %s: %w", resourceID, slot, err)
			}
			moved++
			touched = append(touched, revDir)
		}
		if kept == 0 {
			if err := os.Remove(revDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return moved, fmt.Errorf("sink: purge %q: %w", resourceID, err)
			}
			touched = append(touched, resDir)
		}
	}
	if rest, err := os.ReadDir(resDir); err == nil && len(rest) == 0 {
		if err := os.Remove(resDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return moved, fmt.Errorf("sink: purge %q: %w", resourceID, err)
		}
		touched = append(touched, filepath.Dir(resDir))
	}
	if moved == 0 && len(touched) == 0 {
		return 0, nil
	}
	touched = append(touched, grave)
	if err := d.syncNow(dedupStrings(touched)...); err != nil {
		return moved, fmt.Errorf("sink: purge %q: %w", resourceID, err)
	}
	return moved, nil
}

// makeGraveyard creates the graveyard directory, durably, before anything
// is moved into it.
func (d *Sink) makeGraveyard(dataDir, grave string) error {
	if err := os.Mkdir(grave, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sink: purge: graveyard %s: %w", grave, err)
	}
	if err := d.syncNow(dataDir); err != nil {
		return fmt.Errorf("sink: purge: graveyard %s: %w", grave, err)
	}
	return nil
}

// buryGraveyard removes the store directories the graveyard's entries name
// (those holding a revision of resourceID, or no readable info, and not
// named by an entry still in the index), makes that durable, then removes
// the graveyard. It reports whether there was a graveyard.
func (d *Sink) buryGraveyard(dataDir, grave, resourceID string) (bool, error) {
	entries, err := os.ReadDir(grave)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sink: purge %q: graveyard: %w", resourceID, err)
	}
	live, err := liveUIDs(filepath.Join(dataDir, "resource", resourceID))
	if err != nil {
		return false, fmt.Errorf("sink: purge %q: %w", resourceID, err)
	}
	storeDir := filepath.Join(dataDir, "store")
	removedStore := false
	for _, e := range entries {
		st, err := readSlot(filepath.Join(grave, e.Name()))
		if err != nil || st.uid == "" {
			continue
		}
		if _, ok := live[st.uid]; ok {
			continue
		}
		info, _, err := d.readStoredInfo(dataDir, st.uid)
		if err != nil {
			return false, err
		}
		if info != nil && info.ResourceID != resourceID {
			continue // another resource's: not ours to remove
		}
		dir := filepath.Join(storeDir, st.uid)
		if err := os.RemoveAll(dir); err != nil {
			return false, fmt.Errorf("sink: purge %q: store %s: %w", resourceID, st.uid, err)
		}
		removedStore = true
	}
	if removedStore {
		d.markDirty(storeDir)
		// The store removals must be durable before the graveyard, which
		// lists them, goes.
		if err := d.syncNow(storeDir); err != nil {
			return false, fmt.Errorf("sink: purge %q: %w", resourceID, err)
		}
	}
	if err := os.RemoveAll(grave); err != nil {
		return false, fmt.Errorf("sink: purge %q: graveyard: %w", resourceID, err)
	}
	d.markDirty(dataDir)
	return true, nil
}

// liveUIDs lists the uids the index entries below resDir still name.
func liveUIDs(resDir string) (map[string]struct{}, error) {
	live := map[string]struct{}{}
	revs, err := os.ReadDir(resDir)
	if errors.Is(err, fs.ErrNotExist) {
		return live, nil
	}
	if err != nil {
		return nil, err
	}
	for _, rev := range revs {
		if !rev.IsDir() {
			continue
		}
		slots, err := os.ReadDir(filepath.Join(resDir, rev.Name()))
		if err != nil {
			return nil, err
		}
		for _, s := range slots {
			if st, err := readSlot(filepath.Join(resDir, rev.Name(), s.Name())); err == nil && st.uid != "" {
				live[st.uid] = struct{}{}
			}
		}
	}
	return live, nil
}

func dedupStrings(s []string) []string {
	seen := map[string]struct{}{}
	out := s[:0]
	for _, v := range s {
		if _, ok := seen[v]; !ok {
			seen[v] = struct{}{}
			out = append(out, v)
		}
	}
	return out
}
