package disk

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sqlitemeta"
	"github.com/specstar/replicator/sink/internal/store"
)

// applyMetaSQLite is ApplyMeta for FileSqliteMetaStore. The newer-wins rule
// needs total_revision_count, which is not a column, so it is decided in Go
// (decideMeta, the same code as for .data files) inside one IMMEDIATE
// transaction: the write lock is taken before the current row is read, so
// no other writer (another process included) can change the row between
// the decision and the UPSERT, whose WHERE re-checks it anyway.
func (d *Sink) applyMetaSQLite(ctx context.Context, model string, meta *events.ResourceMeta, encoded []byte) (store.Outcome, error) {
	if _, err := sqlitemeta.Row(meta, encoded); err != nil {
		return 0, err // refused before the file is created
	}
	db, path, err := d.metaDB(ctx, model, true)
	if err != nil {
		return 0, err
	}
	return sqlitemeta.Put(ctx, db, path, meta, encoded, func(existing []byte) (store.Outcome, error) {
		return d.decideMeta(model, meta, encoded, existing, fmt.Sprintf("%s row %q", path, meta.ResourceID))
	})
}

// metaDB returns the model's meta.db handle. For writing it is created
// if needed and given the contract schema; for reading it is opened
// read-only and must exist (fs.ErrNotExist otherwise), and nothing in the
// file is changed.
func (d *Sink) metaDB(ctx context.Context, model string, write bool) (*sql.DB, string, error) {
	dir := filepath.Join(d.root, model)
	path := filepath.Join(dir, "meta.db")
	d.mu.Lock()
	if db := d.dbs[model]; db != nil {
		d.mu.Unlock()
		return db, path, nil
	}
	if db := d.roDBs[model]; db != nil && !write {
		d.mu.Unlock()
		return db, path, nil
	}
	d.mu.Unlock()

	// One handle per model is opened at a time: the per-resource locks do
	// not cover this.
	unlock := d.locks.Lock("\x00db\x00" + model)
	defer unlock()
	d.mu.Lock()
	if db := d.dbs[model]; db != nil {
		d.mu.Unlock()
		return db, path, nil
	}
	if db := d.roDBs[model]; db != nil && !write {
		d.mu.Unlock()
		return db, path, nil
	}
	d.mu.Unlock()

	_, statErr := os.Stat(path)
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return nil, path, fmt.Errorf("sink: %w", statErr)
	}
	if !write && statErr != nil {
		return nil, path, fmt.Errorf("sink: meta store %s: %w", path, fs.ErrNotExist)
	}
	if write {
		if _, err := d.ensureDir(dir); err != nil {
			return nil, path, err
		}
	}
	db, err := sqlitemeta.Open(ctx, path, write)
	if err != nil {
		return nil, path, fmt.Errorf("sink: %w", err)
	}
	if write && statErr != nil {
		d.markDirty(dir) // the new file's entry
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		db.Close()
		return nil, path, errors.New("sink: disk is closed")
	}
	if write {
		d.dbs[model] = db
	} else {
		d.roDBs[model] = db
	}
	return db, path, nil
}
