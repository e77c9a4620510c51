// Package sqlitemeta is SpecStar's FileSqliteMetaStore: a SQLite file with
// the contract's resource_meta table, one row per resource. It exists so
// that the backends keeping such a file (the disk sink's meta=sqlite, the
// S3 factory's {prefix}{model}/meta.db) share one byte-compatible
// implementation without importing one another.
package sqlitemeta

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"

	_ "modernc.org/sqlite" // pure-Go SQLite driver "sqlite"
)

// The FileSqliteMetaStore schema. The CREATE statements are SpecStar's own
// text (SQLite keeps it in sqlite_master, and the fixture meta.db shows it):
// the nine-column table of the SpecStar version that wrote the fixtures,
// then the contract's rev_* columns added the way SpecStar adds them to an
// older file (ALTER TABLE ... ADD COLUMN), so a file we create is the same
// as one SpecStar created and later upgraded, and a SpecStar file we open
// is upgraded the same way.
const (
	sqlCreateTable = `CREATE TABLE IF NOT EXISTS resource_meta (
                resource_id TEXT PRIMARY KEY,
                data BLOB NOT NULL,
                created_time REAL NOT NULL,
                updated_time REAL NOT NULL,
                created_by TEXT NOT NULL,
                updated_by TEXT NOT NULL,
                is_deleted INTEGER NOT NULL,
                schema_version TEXT,
                indexed_data TEXT  -- JSON 格式的索引數據
            )
        `
	// sqlIndexTail is what follows each CREATE INDEX in SpecStar's source
	// (a triple-quoted Python string); SQLite stores it verbatim.
	sqlIndexTail = "\n        "
)

// sqlUpsert writes a row; the WHERE makes it a compare-and-swap on the data
// the decision was made on (?15: NULL when there was no row), so a row
// changed behind our back is reported instead of overwritten.
const sqlUpsert = `INSERT INTO resource_meta
    (resource_id, data, created_time, updated_time, created_by, updated_by,
     is_deleted, schema_version, indexed_data,
     rev_status, rev_created_by, rev_updated_by, rev_created_time, rev_updated_time)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
ON CONFLICT(resource_id) DO UPDATE SET
    data = excluded.data, created_time = excluded.created_time, updated_time = excluded.updated_time,
    created_by = excluded.created_by, updated_by = excluded.updated_by, is_deleted = excluded.is_deleted,
    schema_version = excluded.schema_version, indexed_data = excluded.indexed_data,
    rev_status = excluded.rev_status, rev_created_by = excluded.rev_created_by,
    rev_updated_by = excluded.rev_updated_by, rev_created_time = excluded.rev_created_time,
    rev_updated_time = excluded.rev_updated_time
WHERE resource_meta.data IS ?15`

// Open opens the meta store file at path. For writing it is created if
// needed and given the contract schema (Put and Delete take the write lock
// before they read); read-only it must exist and nothing in it changes.
// One connection: SQLite serializes writers anyway.
func Open(ctx context.Context, path string, write bool) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(30000)")
	if write {
		q.Add("_pragma", "synchronous(FULL)")
		q.Set("_txlock", "immediate")
	} else {
		q.Set("mode", "ro")
	}
	db, err := sql.Open("sqlite", URI(path, q))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if write {
		if err := InitSchema(ctx, db); err != nil {
			db.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// URI makes a file: URI for path, percent-encoding everything that could
// be read as URI syntax (a model name may hold "?", "#" or "%").
func URI(path string, q url.Values) string {
	var b strings.Builder
	b.WriteString("file:")
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '/' || c == '-' || c == '_' || c == '.' || c == '~' ||
			c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	b.WriteByte('?')
	b.WriteString(q.Encode())
	return b.String()
}

// InitSchema creates or upgrades the resource_meta table as SpecStar does.
func InitSchema(ctx context.Context, db *sql.DB) error {
	// metaColumns are the contract's promoted columns with their SQLite types,
	// in the order SpecStar adds missing ones.
	metaColumns := [...]struct{ name, typ string }{
		{"indexed_data", "TEXT"},
		{"schema_version", "TEXT"},
		{"rev_status", "TEXT"},
		{"rev_created_by", "TEXT"},
		{"rev_updated_by", "TEXT"},
		{"rev_created_time", "REAL"},
		{"rev_updated_time", "REAL"},
	}

	// metaIndexes are the contract's indexes, named idx_{column}.
	metaIndexes := [...]string{
		"created_time", "updated_time", "created_by", "updated_by", "is_deleted",
		"rev_status", "rev_created_by", "rev_updated_by", "rev_created_time", "rev_updated_time",
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, sqlCreateTable); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `PRAGMA table_info(resource_meta)`)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for rows.Next() {
		var (
			cid         int
			name, typ   string
			notNull, pk int
			dflt        sql.NullString
		)
		if err := rows.Scan(&cid, &name, &typ, &notNull, &dflt, &pk); err != nil {
			rows.Close()
			return err
		}
		have[name] = true
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, c := range metaColumns {
		if !have[c.name] {
			if _, err := tx.ExecContext(ctx, "ALTER TABLE resource_meta ADD COLUMN "+c.name+" "+c.typ); err != nil {
				return fmt.Errorf("add column %s: %w", c.name, err)
			}
		}
	}
	for _, col := range metaIndexes {
		stmt := "CREATE INDEX IF NOT EXISTS idx_" + col + " ON resource_meta(" + col + ")" + sqlIndexTail
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create index idx_%s: %w", col, err)
		}
	}
	return tx.Commit()
}

// noTable says whether err is SQLite's answer for a file without the
// resource_meta table: a meta store its writer has just created (SQLite
// makes the file before the schema is committed), which holds no metas.
func noTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table: resource_meta")
}

// Get reads a resource's encoded meta; ok is false when there is no row.
func Get(ctx context.Context, db *sql.DB, resourceID string) (data []byte, ok bool, err error) {
	err = db.QueryRowContext(ctx, `SELECT data FROM resource_meta WHERE resource_id = ?`, resourceID).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) || noTable(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// Put stores meta (encoded in the store's encoding) if decide, given the
// stored encoding (nil when there is none), says Written; whatever decide
// says is returned. The decision and the write happen in one IMMEDIATE
// transaction: the write lock is taken before the row is read, so no other
// writer (another process included) can change the row between the
// decision and the UPSERT, whose WHERE re-checks it anyway. where names
// the store in errors.
func Put(ctx context.Context, db *sql.DB, where string, meta *events.ResourceMeta, encoded []byte,
	decide func(existing []byte) (store.Outcome, error)) (store.Outcome, error) {
	row, err := Row(meta, encoded)
	if err != nil {
		return 0, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sink: %s: begin: %w", where, err)
	}
	defer tx.Rollback()
	var existing []byte
	err = tx.QueryRowContext(ctx, `SELECT data FROM resource_meta WHERE resource_id = ?`, meta.ResourceID).Scan(&existing)
	if errors.Is(err, sql.ErrNoRows) {
		existing, err = nil, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sink: %s: read meta %q: %w", where, meta.ResourceID, err)
	}
	out, err := decide(existing)
	if err != nil || out != store.Written {
		return out, err
	}
	var prev any
	if existing != nil {
		prev = existing
	}
	res, err := tx.ExecContext(ctx, sqlUpsert, append(row, prev)...)
	if err != nil {
		return 0, fmt.Errorf("sink: %s: write meta %q: %w", where, meta.ResourceID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("sink: %s: write meta %q: %w", where, meta.ResourceID, err)
	} else if n != 1 {
		return 0, fmt.Errorf("sink: %s: meta %q changed concurrently", where, meta.ResourceID)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sink: %s: commit: %w", where, err)
	}
	return store.Written, nil
}

// Delete removes a resource's row unless keep, given its encoded meta,
// says it stays (Stale); Written if a row went, Unchanged if there was
// none. Decision and compare-and-swap DELETE share one IMMEDIATE
// transaction, durable at commit.
func Delete(ctx context.Context, db *sql.DB, where, resourceID string, keep func(existing []byte) bool) (store.Outcome, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sink: %s: begin: %w", where, err)
	}
	defer tx.Rollback()
	var existing []byte
	err = tx.QueryRowContext(ctx, `SELECT data FROM resource_meta WHERE resource_id = ?`, resourceID).Scan(&existing)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Unchanged, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sink: %s: read meta %q: %w", where, resourceID, err)
	}
	if keep(existing) {
		return store.Stale, nil
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM resource_meta WHERE resource_id = ? AND data = ?`, resourceID, existing)
	if err != nil {
		return 0, fmt.Errorf("sink: %s: purge meta %q: %w", where, resourceID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("sink: %s: purge meta %q: %w", where, resourceID, err)
	} else if n != 1 {
		return 0, fmt.Errorf("sink: %s: meta %q changed concurrently", where, resourceID)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sink: %s: commit purge of %q: %w", where, resourceID, err)
	}
	return store.Written, nil
}

// Page reads the next store.ListPage ids after the given one, in byte
// order (ids are never empty, so "" starts at the first); the rows are
// closed before it returns, so the one connection stays free.
func Page(ctx context.Context, db *sql.DB, after string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT resource_id FROM resource_meta WHERE resource_id > ? ORDER BY resource_id LIMIT ?`, after, store.ListPage)
	if noTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	page := make([]string, 0, store.ListPage)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		page = append(page, id)
	}
	return page, rows.Err()
}

// Row is the UPSERT's arguments ?1..?14 for a meta, computed as SpecStar's
// SqliteMetaStore does; a meta whose indexed_data json.dumps cannot write
// is an InvalidError, as it is a failure in SpecStar.
func Row(meta *events.ResourceMeta, encoded []byte) ([]any, error) {
	var indexed any
	if meta.IndexedData.Present {
		var v any
		if !meta.IndexedData.Null {
			v = meta.IndexedData.Value
		}
		b, err := AppendPyJSON(nil, v, 0)
		if err != nil {
			return nil, store.Invalidf(fmt.Sprintf("meta %q", meta.ResourceID),
				"indexed_data cannot be stored in SQLite (SpecStar's json.dumps fails too): %v", err)
		}
		indexed = string(b)
	}
	isDeleted := int64(0)
	if meta.IsDeleted {
		isDeleted = 1
	}
	optStr := func(o store.OptString) any {
		if o.IsSet() {
			return o.Value
		}
		return nil
	}
	optTime := func(o events.Opt[events.Time]) any {
		if o.IsSet() {
			return PyTimestamp(o.Value)
		}
		return nil
	}
	return []any{
		meta.ResourceID,
		encoded,
		PyTimestamp(meta.CreatedTime),
		PyTimestamp(meta.UpdatedTime),
		meta.CreatedBy,
		meta.UpdatedBy,
		isDeleted,
		optStr(meta.SchemaVersion),
		indexed,
		optStr(meta.RevStatus),
		optStr(meta.RevCreatedBy),
		optStr(meta.RevUpdatedBy),
		optTime(meta.RevCreatedTime),
		optTime(meta.RevUpdatedTime),
	}, nil
}
