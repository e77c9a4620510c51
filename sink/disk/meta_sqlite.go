package disk

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

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

// applyMetaSQLite is ApplyMeta for FileSqliteMetaStore. The newer-wins rule
// needs total_revision_count, which is not a column, so it is decided in Go
// (decideMeta, the same code as for .data files) inside one IMMEDIATE
// transaction: the write lock is taken before the current row is read, so
// no other writer (another process included) can change the row between
// the decision and the UPSERT, whose WHERE re-checks it anyway.
func (d *Sink) applyMetaSQLite(ctx context.Context, model string, meta *events.ResourceMeta, encoded []byte) (store.Outcome, error) {
	row, err := metaRow(meta, encoded)
	if err != nil {
		return 0, err
	}
	db, path, err := d.metaDB(ctx, model, true)
	if err != nil {
		return 0, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sink: %s: begin: %w", path, err)
	}
	defer tx.Rollback()
	var existing []byte
	err = tx.QueryRowContext(ctx, `SELECT data FROM resource_meta WHERE resource_id = ?`, meta.ResourceID).Scan(&existing)
	if errors.Is(err, sql.ErrNoRows) {
		existing, err = nil, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sink: %s: read meta %q: %w", path, meta.ResourceID, err)
	}
	out, err := d.decideMeta(model, meta, encoded, existing, fmt.Sprintf("%s row %q", path, meta.ResourceID))
	if err != nil || out != store.Written {
		return out, err
	}
	var prev any
	if existing != nil {
		prev = existing
	}
	res, err := tx.ExecContext(ctx, sqlUpsert, append(row, prev)...)
	if err != nil {
		return 0, fmt.Errorf("sink: %s: write meta %q: %w", path, meta.ResourceID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("sink: %s: write meta %q: %w", path, meta.ResourceID, err)
	} else if n != 1 {
		return 0, fmt.Errorf("sink: %s: meta %q changed concurrently", path, meta.ResourceID)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sink: %s: commit: %w", path, err)
	}
	return store.Written, nil
}

// metaRow is the UPSERT's arguments ?1..?14 for a meta, computed as
// SpecStar's SqliteMetaStore does.
func metaRow(meta *events.ResourceMeta, encoded []byte) ([]any, error) {
	var indexed any
	if meta.IndexedData.Present {
		var v any
		if !meta.IndexedData.Null {
			v = meta.IndexedData.Value
		}
		b, err := appendPyJSON(nil, v, 0)
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
			return pyTimestamp(o.Value)
		}
		return nil
	}
	return []any{
		meta.ResourceID,
		encoded,
		pyTimestamp(meta.CreatedTime),
		pyTimestamp(meta.UpdatedTime),
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
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(30000)")
	if write {
		if _, err := d.ensureDir(dir); err != nil {
			return nil, path, err
		}
		q.Add("_pragma", "synchronous(FULL)")
		q.Set("_txlock", "immediate")
	} else {
		q.Set("mode", "ro")
	}
	db, err := sql.Open("sqlite", sqliteURI(path, q))
	if err != nil {
		return nil, path, fmt.Errorf("sink: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if write {
		if err := initSchema(ctx, db); err != nil {
			db.Close()
			return nil, path, fmt.Errorf("sink: %s: %w", path, err)
		}
		if statErr != nil {
			d.markDirty(dir) // the new file's entry
		}
	} else if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, path, fmt.Errorf("sink: open %s: %w", path, err)
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

// sqliteURI makes a file: URI for path, percent-encoding everything that
// could be read as URI syntax (a model name may hold "?", "#" or "%").
func sqliteURI(path string, q url.Values) string {
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

// initSchema creates or upgrades the resource_meta table as SpecStar does.
func initSchema(ctx context.Context, db *sql.DB) error {
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

// pyTimestamp is Python's datetime.timestamp() for a SpecStar datetime, the
// REAL stored in the time columns. An aware value is
// timedelta.total_seconds() of its distance to the epoch: the exact
// microsecond count divided by 10**6, correctly rounded. A naive value is
// read as UTC (SpecStar runs with TZ=UTC here) and computed as CPython
// does for naive values: whole seconds plus microsecond / 1e6, in floats.
func pyTimestamp(t events.Time) float64 {
	in := t.Instant()
	sec := in.Unix()
	us := int64(in.Nanosecond() / 1000)
	if t.Naive {
		return float64(sec) + float64(float64(us)/1e6)
	}
	total := new(big.Int).Mul(big.NewInt(sec), big.NewInt(1_000_000))
	total.Add(total, big.NewInt(us))
	f, _ := new(big.Rat).SetFrac(total, big.NewInt(1_000_000)).Float64()
	return f
}

// maxPyJSONDepth bounds nesting (the values come from a bounded decoder
// already; this only guards hand-built ones).
const maxPyJSONDepth = 1000

// appendPyJSON writes v as Python's json.dumps(v, ensure_ascii=False) does:
// separators ", " and ": ", keys in the map's own order, floats as repr()
// (NaN and Infinity as such), non-ASCII raw. Values json.dumps cannot
// serialize (datetimes, bytes, extensions, structs) are an error, as they
// are for SpecStar's SqliteMetaStore.
func appendPyJSON(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxPyJSONDepth {
		return nil, errors.New("nesting too deep")
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if x {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case events.BigInt:
		return append(b, x...), nil
	case float64:
		return appendPyFloat(b, x), nil
	case string:
		return appendPyString(b, x), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			var err error
			if b, err = appendPyJSON(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case events.Map:
		b = append(b, '{')
		for i, it := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			var err error
			if b, err = appendPyKey(b, it.Key); err != nil {
				return nil, err
			}
			b = append(b, ": "...)
			if b, err = appendPyJSON(b, it.Value, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, fmt.Errorf("Object of type %s is not JSON serializable", pyTypeName(v))
}

// appendPyKey writes a dict key as json.dumps converts it: strings as they
// are, None/bool/int/float as their JSON text in quotes.
func appendPyKey(b []byte, k any) ([]byte, error) {
	switch x := k.(type) {
	case string:
		return appendPyString(b, x), nil
	case nil, bool, int64, uint64, events.BigInt, float64:
		text, _ := appendPyJSON(nil, x, 0)
		return appendPyString(b, string(text)), nil
	}
	return nil, fmt.Errorf("keys must be str, int, float, bool or None, not %s", pyTypeName(k))
}

func pyTypeName(v any) string {
	switch v.(type) {
	case events.Time:
		return "datetime"
	case []byte:
		return "bytes"
	case events.Ext:
		return "Ext"
	case events.Struct:
		return "Struct"
	}
	return fmt.Sprintf("%T", v)
}

// appendPyFloat is float.__repr__: the shortest round-trip digits, fixed
// notation when the decimal exponent is in [-4, 16), scientific otherwise
// (at least two exponent digits, always signed), ".0" added to integral
// fixed values.
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	if f != 0 {
		// The decimal exponent of the shortest digits decides the notation.
		e := strconv.FormatFloat(f, 'e', -1, 64)
		exp, _ := strconv.Atoi(e[strings.LastIndexByte(e, 'e')+1:])
		if exp < -4 || exp >= 16 {
			return append(b, e...)
		}
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'f', -1, 64)
	if !strings.ContainsRune(string(b[start:]), '.') {
		b = append(b, ".0"...)
	}
	return b
}

// appendPyString is json.dumps' string form with ensure_ascii=False: only
// '"', '\\' and C0 controls are escaped (\n \r \t \b \f by name, others as
// \u00xx in lowercase hex); everything else is written raw.
func appendPyString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf || c >= 0x20 && c != '"' && c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
	}
	return append(b, '"')
}
