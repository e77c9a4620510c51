// Package specstarpg is a test writer: it writes a SpecStar Postgres
// deployment (PostgresMetaStore meta tables, PostgresResourceStore
// resource_data / resource_index) row for row as SpecStar does, or, with
// Options.S3, the Postgres+S3 factory's deployment (metas in Postgres,
// revisions and blobs in S3, written with the AWS SDK directly), so that
// readers of those stores (source/postgres.Source, the S3 readers) can be
// tested without the Python library.
package specstarpg

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
)

// NoneSchema is PostgresResourceStore's stand-in for a None schema_version
// in resource_index (whose primary key cannot hold NULL).
const NoneSchema = "__none__"

// Options choose the tables and encoding, as SpecStar's Postgres factories
// configure them.
type Options struct {
	// TablePrefix is SpecStar's table_prefix, before every table name.
	TablePrefix string
	// MetaTable is the meta table template, "{model}" replaced by the model
	// name; "" means "{model}_meta", the factories' naming.
	MetaTable string
	// Encoding of the meta data column, the info column and the payloads;
	// UNSET means msgpack, the Postgres factories' default.
	Encoding events.Opt[events.Encoding]
	// S3, if set, keeps revisions (and blobs) in S3 as the Postgres+S3
	// factory does: no resource_data / resource_index tables.
	S3 *S3Target
}

// Writer writes SpecStar rows; it exists so tests can produce exactly what
// a SpecStar deployment would hold.
type Writer struct {
	pool   *pgxpool.Pool
	prefix string
	tmpl   string
	enc    events.Encoding
	s3     *S3Target // nil: revisions in the Postgres resource tables
}

// Write describes one create or update, as the arguments SpecStar's
// resource manager gets (who, when, which schema version).
type Write struct {
	At            events.Time // zero: now, aware UTC; truncated to microseconds as Python datetimes are
	By            string      // "" means "tester"
	SchemaVersion events.Opt[string]
	Status        string // "" means "stable"
	IndexedData   events.Opt[events.Value]
}

// Written is what one write stored, so a test can compare a reader's
// output with it.
type Written struct {
	Model    string
	Meta     *events.ResourceMeta
	MetaData []byte // the meta data column
	Info     *events.RevisionInfo
	InfoData []byte // the info column
	Data     []byte // the payload bytes (resource_data.data)
	// Keys are the S3 objects written (S3 mode), in the order written:
	// store/{uid}/data, store/{uid}/info, then the resource/.../uid index.
	Keys []string
}

// ErrSameData is returned by Update when the payload hashes like the
// current revision's: SpecStar writes no new revision then.
var ErrSameData = errors.New("specstarpg: payload equals the current revision's (no new revision)")

// Open connects to dsn; it is the one way to get a Writer.
func Open(ctx context.Context, dsn string, opts Options) (*Writer, error) {
	enc := events.Msgpack
	if opts.Encoding.IsSet() {
		enc = opts.Encoding.Value
	}
	tmpl := opts.MetaTable
	if tmpl == "" {
		tmpl = "{model}_meta"
	}
	s3t, err := opts.S3.withDefaults()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("specstarpg: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("specstarpg: connect: %w", err)
	}
	return &Writer{pool: pool, prefix: opts.TablePrefix, tmpl: tmpl, enc: enc, s3: s3t}, nil
}

// Close closes the connections.
func (w *Writer) Close() { w.pool.Close() }

// MetaTable is the name of a model's meta table.
func (w *Writer) MetaTable(model string) string {
	return w.prefix + strings.ReplaceAll(w.tmpl, "{model}", model)
}

// DataTable is the name of the resource_data table.
func (w *Writer) DataTable() string { return w.prefix + "resource_data" }

// IndexTable is the name of the resource_index table.
func (w *Writer) IndexTable() string { return w.prefix + "resource_index" }

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// CreateModel creates, if missing, a model's meta table and (without S3)
// the resource tables with the contract's schema (and the indexes a reader
// relies on).
func (w *Writer) CreateModel(ctx context.Context, model string) error {
	meta := w.MetaTable(model)
	m, d, x := ident(meta), ident(w.DataTable()), ident(w.IndexTable())
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + m + ` (
    resource_id        TEXT PRIMARY KEY,
    data               BYTEA NOT NULL,
    created_time       TIMESTAMP NOT NULL,
    updated_time       TIMESTAMP NOT NULL,
    created_by         TEXT NOT NULL,
    updated_by         TEXT NOT NULL,
    is_deleted         BOOLEAN NOT NULL,
    schema_version     TEXT,
    indexed_data       JSONB,
    rev_status         TEXT,
    rev_created_by     TEXT,
    rev_updated_by     TEXT,
    rev_created_time   TIMESTAMP,
    rev_updated_time   TIMESTAMP)`,
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+meta+"_created_time") + ` ON ` + m + ` (created_time)`,
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+meta+"_updated_time") + ` ON ` + m + ` (updated_time)`,
		`CREATE TABLE IF NOT EXISTS ` + d + ` (
    uid   TEXT PRIMARY KEY,
    data  BYTEA NOT NULL,
    info  BYTEA NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + x + ` (
    resource_id     TEXT NOT NULL,
    revision_id     TEXT NOT NULL,
    schema_version  TEXT,
    uid             TEXT NOT NULL REFERENCES ` + d + `(uid),
    PRIMARY KEY (resource_id, revision_id, schema_version))`,
		`CREATE INDEX IF NOT EXISTS ` + ident("idx_"+w.IndexTable()+"_resource_id") + ` ON ` + x + ` (resource_id)`,
	}
	if w.s3 != nil {
		stmts = stmts[:3] // the Postgres+S3 factory has no resource tables
	}
	for _, s := range stmts {
		if _, err := w.pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("specstarpg: create tables of model %q: %w", model, err)
		}
	}
	return nil
}

// DropAll drops every table whose name starts with the writer's prefix
// (test cleanup; refuses an empty prefix).
func (w *Writer) DropAll(ctx context.Context) error {
	if w.prefix == "" {
		return errors.New("specstarpg: DropAll needs a table prefix")
	}
	rows, err := w.pool.Query(ctx, `SELECT tablename::text FROM pg_tables
		WHERE schemaname = current_schema() AND starts_with(tablename, $1) ORDER BY 1`, w.prefix)
	if err != nil {
		return fmt.Errorf("specstarpg: list tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("specstarpg: list tables: %w", err)
	}
	for _, n := range names {
		if _, err := w.pool.Exec(ctx, `DROP TABLE IF EXISTS `+ident(n)+` CASCADE`); err != nil {
			return fmt.Errorf("specstarpg: drop %s: %w", n, err)
		}
	}
	return nil
}

// Create writes a new resource: its first revision and its meta.
func (w *Writer) Create(ctx context.Context, model, resourceID string, payload events.Value, wr Write) (*Written, error) {
	return w.write(ctx, model, resourceID, payload, wr, true)
}

// Update writes a new revision of an existing resource and updates its
// meta; it returns ErrSameData (writing nothing) when the payload is the
// current revision's.
func (w *Writer) Update(ctx context.Context, model, resourceID string, payload events.Value, wr Write) (*Written, error) {
	return w.write(ctx, model, resourceID, payload, wr, false)
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (w *Writer) write(ctx context.Context, model, rid string, payload events.Value, wr Write, create bool) (*Written, error) {
	table := w.MetaTable(model)
	where := fmt.Sprintf("specstarpg: %s row %q", table, rid)
	at := wr.At
	if at.IsZero() {
		at = events.Time{Time: time.Now().UTC()}
	}
	at.Time = at.Time.Truncate(time.Microsecond)
	by := wr.By
	if by == "" {
		by = "tester"
	}
	status := wr.Status
	if status == "" {
		status = "stable"
	}
	sv := wr.SchemaVersion
	if !sv.Present {
		sv = events.Null[string]()
	}
	data, err := events.EncodeValue(w.enc, payload)
	if err != nil {
		return nil, fmt.Errorf("%s: payload: %w", where, err)
	}

	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: begin: %w", where, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	var prev *events.ResourceMeta
	var prevInfo *events.RevisionInfo
	if !create {
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT data FROM `+ident(table)+` WHERE resource_id = $1 FOR UPDATE`, rid).Scan(&raw); err != nil {
			return nil, fmt.Errorf("%s: read current meta: %w", where, err)
		}
		if prev, err = events.DecodeResourceMeta(w.enc, raw); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		var rawInfo []byte
		if w.s3 != nil {
			rawInfo, err = w.s3CurrentInfo(ctx, model, prev)
		} else {
			psv := NoneSchema
			if prev.SchemaVersion.IsSet() {
				psv = prev.SchemaVersion.Value
			}
			err = tx.QueryRow(ctx, `SELECT rd.info FROM `+ident(w.IndexTable())+` ri JOIN `+ident(w.DataTable())+
				` rd ON rd.uid = ri.uid WHERE ri.resource_id = $1 AND ri.revision_id = $2 AND ri.schema_version = $3`,
				rid, prev.CurrentRevisionID, psv).Scan(&rawInfo)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: read current revision %q: %w", where, prev.CurrentRevisionID, err)
		}
		if prevInfo, err = events.DecodeRevisionInfo(w.enc, rawInfo); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}

	n := int64(1)
	info := &events.RevisionInfo{
		UID:              newUID(),
		ResourceID:       rid,
		ParentRevisionID: events.Null[string](),
		SchemaVersion:    sv,
		DataHash:         events.Some(dedup.DataHash(data)),
		Status:           status,
		CreatedTime:      at,
		UpdatedTime:      at,
		CreatedBy:        by,
		UpdatedBy:        by,
	}
	if prev != nil {
		if prevInfo.DataHash == info.DataHash && prev.SchemaVersion == sv {
			return nil, ErrSameData
		}
		n = prev.TotalRevisionCount + 1
		info.ParentRevisionID = events.Some(prev.CurrentRevisionID)
		info.ParentSchemaVersion = prevInfo.SchemaVersion
	}
	info.RevisionID = fmt.Sprintf("%s:%d", rid, n)
	infoData, err := info.Encode(w.enc)
	if err != nil {
		return nil, fmt.Errorf("%s: info: %w", where, err)
	}
	meta := &events.ResourceMeta{
		CurrentRevisionID:  info.RevisionID,
		ResourceID:         rid,
		SchemaVersion:      sv,
		TotalRevisionCount: n,
		CreatedTime:        at,
		UpdatedTime:        at,
		CreatedBy:          by,
		UpdatedBy:          by,
		IndexedData:        wr.IndexedData,
		RevStatus:          events.Some(status),
		RevCreatedBy:       events.Some(by),
		RevUpdatedBy:       events.Some(by),
		RevCreatedTime:     events.Some(at),
		RevUpdatedTime:     events.Some(at),
	}
	if prev != nil {
		meta.CreatedTime, meta.CreatedBy = prev.CreatedTime, prev.CreatedBy
	}
	metaData, err := meta.Encode(w.enc)
	if err != nil {
		return nil, fmt.Errorf("%s: meta: %w", where, err)
	}

	// The resource store first, then the meta: SpecStar's order, so a
	// reader that sees the meta finds its revision.
	var keys []string
	if w.s3 != nil {
		if keys, err = w.s3PutRevision(ctx, model, info, data, infoData); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	} else if err := w.insertRevision(ctx, tx, info, data, infoData); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	var indexed any
	if meta.IndexedData.Present {
		var v events.Value
		if !meta.IndexedData.Null {
			v = meta.IndexedData.Value
		}
		b, err := events.EncodeValue(events.JSON, v)
		if err != nil {
			return nil, fmt.Errorf("%s: indexed_data: %w", where, err)
		}
		indexed = string(b)
	}
	var svCol any
	if sv.IsSet() {
		svCol = sv.Value
	}
	upsert := `INSERT INTO ` + ident(table) + ` (resource_id, data, created_time, updated_time, created_by,
		updated_by, is_deleted, schema_version, indexed_data, rev_status, rev_created_by, rev_updated_by,
		rev_created_time, rev_updated_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`
	if !create { // a create of an existing id fails on the primary key, as SpecStar's does
		upsert += `
		ON CONFLICT (resource_id) DO UPDATE SET data = EXCLUDED.data, created_time = EXCLUDED.created_time,
		updated_time = EXCLUDED.updated_time, created_by = EXCLUDED.created_by, updated_by = EXCLUDED.updated_by,
		is_deleted = EXCLUDED.is_deleted, schema_version = EXCLUDED.schema_version,
		indexed_data = EXCLUDED.indexed_data, rev_status = EXCLUDED.rev_status,
		rev_created_by = EXCLUDED.rev_created_by, rev_updated_by = EXCLUDED.rev_updated_by,
		rev_created_time = EXCLUDED.rev_created_time, rev_updated_time = EXCLUDED.rev_updated_time`
	}
	_, err = tx.Exec(ctx, upsert, rid, metaData, meta.CreatedTime.Instant(), meta.UpdatedTime.Instant(), meta.CreatedBy, meta.UpdatedBy,
		meta.IsDeleted, svCol, indexed, status, by, by, at.Instant(), at.Instant())
	if err != nil {
		return nil, fmt.Errorf("%s: upsert meta: %w", where, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("%s: commit: %w", where, err)
	}
	return &Written{Model: model, Meta: meta, MetaData: metaData, Info: info, InfoData: infoData, Data: data, Keys: keys}, nil
}

// insertRevision writes a revision into the PostgresResourceStore tables.
func (w *Writer) insertRevision(ctx context.Context, tx pgx.Tx, info *events.RevisionInfo, data, infoData []byte) error {
	if _, err := tx.Exec(ctx, `INSERT INTO `+ident(w.DataTable())+` (uid, data, info) VALUES ($1, $2, $3)`,
		info.UID, data, infoData); err != nil {
		return fmt.Errorf("insert resource_data: %w", err)
	}
	isv := NoneSchema
	if info.SchemaVersion.IsSet() {
		isv = info.SchemaVersion.Value
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+ident(w.IndexTable())+` (resource_id, revision_id, schema_version, uid) VALUES ($1, $2, $3, $4)`,
		info.ResourceID, info.RevisionID, isv, info.UID); err != nil {
		return fmt.Errorf("insert resource_index: %w", err)
	}
	return nil
}
