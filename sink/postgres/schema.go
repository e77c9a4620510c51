package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/specstar/replicator/sink/internal/store"
)

// The contract's Postgres schema, created when missing and upgraded the way
// SpecStar upgrades it: a missing column that SpecStar added later (all of
// them nullable) is added with ALTER TABLE ... ADD COLUMN; nothing is ever
// dropped, renamed or retyped, and a table whose columns have other types,
// that lacks a column SpecStar always had, or that has no unique index for
// the upserts' conflict target is refused with an *InvalidError naming
// table and column: no retry can fix it, so the engine dead-letters that
// table's records and goes on with the other models.
//
// Index names are unique per schema in Postgres, while the contract's are
// per table (idx_created_time on every meta table), so they are prefixed
// with the table name: idx_{table}_{column} (idx_{table}_indexed_data_gin
// for the GIN index); a name longer than 63 bytes is cut and ended with a
// hash of the whole, so that it is neither truncated by Postgres nor
// shared by two tables. An index that already exists on the column (by
// any name: one SpecStar created, say) is not duplicated.

// pgColumn is one column of the contract.
type pgColumn struct {
	name     string
	def      string // in CREATE TABLE
	typ      string // format_type() of the column, what an existing column must have
	required bool   // in every SpecStar version: cannot be added to an old table
}

// pgIndexSpec is a one-column index of the contract.
type pgIndexSpec struct {
	column, method, suffix string
}

// pgTableSpec is one table of the contract.
type pgTableSpec struct {
	name        string
	columns     []pgColumn
	constraints string   // table constraints of CREATE TABLE, if any
	unique      []string // the columns of the upserts' ON CONFLICT target
	indexes     []pgIndexSpec
}

func pgMetaTableSpec(table string) pgTableSpec {
	const (
		text = "text"
		ts   = "timestamp without time zone"
	)
	s := pgTableSpec{
		name: table,
		columns: []pgColumn{
			{"resource_id", "TEXT PRIMARY KEY", text, true},
			{"data", "BYTEA NOT NULL", "bytea", true},
			{"created_time", "TIMESTAMP NOT NULL", ts, true},
			{"updated_time", "TIMESTAMP NOT NULL", ts, true},
			{"created_by", "TEXT NOT NULL", text, true},
			{"updated_by", "TEXT NOT NULL", text, true},
			{"is_deleted", "BOOLEAN NOT NULL", "boolean", true},
			{"schema_version", "TEXT", text, false},
			{"indexed_data", "JSONB", "jsonb", false},
			{"rev_status", "TEXT", text, false},
			{"rev_created_by", "TEXT", text, false},
			{"rev_updated_by", "TEXT", text, false},
			{"rev_created_time", "TIMESTAMP", ts, false},
			{"rev_updated_time", "TIMESTAMP", ts, false},
		},
		unique: []string{"resource_id"},
	}
	for _, c := range []string{
		"created_time", "updated_time", "created_by", "updated_by", "is_deleted",
		"rev_status", "rev_created_by", "rev_updated_by", "rev_created_time", "rev_updated_time",
	} {
		s.indexes = append(s.indexes, pgIndexSpec{c, "btree", c})
	}
	s.indexes = append(s.indexes, pgIndexSpec{"indexed_data", "gin", "indexed_data_gin"})
	return s
}

func pgDataTableSpec(table string) pgTableSpec {
	return pgTableSpec{
		name: table,
		columns: []pgColumn{
			{"uid", "TEXT PRIMARY KEY", "text", true},
			{"data", "BYTEA NOT NULL", "bytea", true},
			{"info", "BYTEA NOT NULL", "bytea", true},
		},
		unique: []string{"uid"},
	}
}

func pgIndexTableSpec(table, dataTable string) pgTableSpec {
	return pgTableSpec{
		name: table,
		columns: []pgColumn{
			{"resource_id", "TEXT NOT NULL", "text", true},
			{"revision_id", "TEXT NOT NULL", "text", true},
			{"schema_version", "TEXT", "text", true},
			{"uid", "TEXT NOT NULL REFERENCES " + pgx.Identifier{dataTable}.Sanitize() + "(uid)", "text", true},
		},
		constraints: "PRIMARY KEY (resource_id, revision_id, schema_version)",
		unique:      []string{"resource_id", "revision_id", "schema_version"},
		indexes:     []pgIndexSpec{{"resource_id", "btree", "resource_id"}},
	}
}

// pgDDLLock is the advisory lock key taken around schema changes, so that
// replicators starting together do not race on CREATE TABLE IF NOT EXISTS
// (which is not safe against itself).
const pgDDLLock int64 = 0x5370_6563_5374_6172 // "SpecStar"

// pgEnsureMetaTable creates or upgrades one meta table.
func pgEnsureMetaTable(ctx context.Context, pool *pgxpool.Pool, table string) error {
	return pgEnsureTables(ctx, pool, pgMetaTableSpec(table))
}

// pgEnsureResourceTables creates or upgrades resource_data and
// resource_index (in that order: the index references the data table).
func pgEnsureResourceTables(ctx context.Context, pool *pgxpool.Pool, dataTable, indexTable string) error {
	return pgEnsureTables(ctx, pool, pgDataTableSpec(dataTable), pgIndexTableSpec(indexTable, dataTable))
}

// pgEnsureTables runs the schema work of some tables in one transaction,
// under the DDL advisory lock.
func pgEnsureTables(ctx context.Context, pool *pgxpool.Pool, specs ...pgTableSpec) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sink: postgres schema: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgDDLLock); err != nil {
		return fmt.Errorf("sink: postgres schema: lock: %w", err)
	}
	for _, s := range specs {
		if err := pgEnsureTable(ctx, tx, s); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sink: postgres schema: commit: %w", err)
	}
	return nil
}

func pgEnsureTable(ctx context.Context, tx pgx.Tx, s pgTableSpec) error {
	ident := pgx.Identifier{s.name}.Sanitize()
	defs := make([]string, 0, len(s.columns)+1)
	for _, c := range s.columns {
		defs = append(defs, c.name+" "+c.def)
	}
	if s.constraints != "" {
		defs = append(defs, s.constraints)
	}
	create := "CREATE TABLE IF NOT EXISTS " + ident + " (\n    " + strings.Join(defs, ",\n    ") + "\n)"
	if _, err := tx.Exec(ctx, create); err != nil {
		return fmt.Errorf("sink: postgres create table %q: %w", s.name, err)
	}

	// Columns: add what SpecStar added later, refuse what conflicts.
	have := map[string]string{}
	err := pgQuery(ctx, tx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`,
		[]any{ident}, func(rows pgx.Rows) error {
			var name, typ string
			if err := rows.Scan(&name, &typ); err != nil {
				return err
			}
			have[name] = typ
			return nil
		})
	if err != nil {
		return fmt.Errorf("sink: postgres table %q: read columns: %w", s.name, err)
	}
	if len(have) == 0 {
		return fmt.Errorf("sink: postgres table %q: created but not found through the search_path", s.name)
	}
	for _, c := range s.columns {
		typ, ok := have[c.name]
		switch {
		case ok && typ != c.typ:
			return store.Invalidf(fmt.Sprintf("table %q column %q", s.name, c.name),
				"has type %s, but SpecStar's schema says %s (the sink never retypes a column: fix the table, then replay the dead letters)",
				typ, c.typ)
		case ok:
		case c.required:
			return store.Invalidf(fmt.Sprintf("table %q column %q", s.name, c.name),
				"missing, and SpecStar's schema always had it: not a SpecStar table")
		default:
			add := "ALTER TABLE " + ident + " ADD COLUMN IF NOT EXISTS " + c.name + " " + c.def
			if _, err := tx.Exec(ctx, add); err != nil {
				return fmt.Errorf("sink: postgres table %q: add column %q: %w", s.name, c.name, err)
			}
		}
	}

	// The conflict target of the upserts must be a unique index.
	var uniques [][]string
	err = pgQuery(ctx, tx, `SELECT array_agg(a.attname::text ORDER BY a.attname)
		FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey::int2[])
		WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
		GROUP BY i.indexrelid`, []any{ident}, func(rows pgx.Rows) error {
		var cols []string
		if err := rows.Scan(&cols); err != nil {
			return err
		}
		uniques = append(uniques, cols)
		return nil
	})
	if err != nil {
		return fmt.Errorf("sink: postgres table %q: read indexes: %w", s.name, err)
	}
	want := slices.Sorted(slices.Values(s.unique))
	found := false
	for _, u := range uniques {
		found = found || slices.Equal(u, want)
	}
	if !found {
		return store.Invalidf(fmt.Sprintf("table %q", s.name), "has no primary key or unique index on (%s), which SpecStar's schema has",
			strings.Join(s.unique, ", "))
	}

	// One-column indexes of the contract, unless the column has one.
	indexed := map[[2]string]bool{}
	err = pgQuery(ctx, tx, `SELECT a.attname::text, am.amname::text
		FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_am am ON am.oid = c.relam
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = to_regclass($1) AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL`,
		[]any{ident}, func(rows pgx.Rows) error {
			var col, method string
			if err := rows.Scan(&col, &method); err != nil {
				return err
			}
			indexed[[2]string{col, method}] = true
			return nil
		})
	if err != nil {
		return fmt.Errorf("sink: postgres table %q: read indexes: %w", s.name, err)
	}
	for _, ix := range s.indexes {
		if indexed[[2]string{ix.column, ix.method}] {
			continue
		}
		name := pgIndexName(s.name, ix.suffix)
		stmt := "CREATE INDEX IF NOT EXISTS " + pgx.Identifier{name}.Sanitize() + " ON " + ident +
			" USING " + ix.method + " (" + ix.column + ")"
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("sink: postgres table %q: create index %q: %w", s.name, name, err)
		}
	}
	return nil
}

// pgIndexName is idx_{table}_{suffix}, cut to 63 bytes with a hash of the
// whole name when longer.
func pgIndexName(table, suffix string) string {
	name := "idx_" + table + "_" + suffix
	if len(name) <= pgMaxIdent {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	tail := fmt.Sprintf("_%08x", h.Sum32())
	cut := pgMaxIdent - len(tail)
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + tail
}

// pgMetaSQL holds the statements of one meta table.
type pgMetaSQL struct {
	table      string
	selectOne  string // $1 resource_id -> data
	selectMany string // $1 resource_ids -> (resource_id, data)
	upsert     string // $1..$14 the columns, $15 the data the row must still hold (NULL: no row)

	stagedUpdate string // $1 table name: the rows of the meta stage whose prev the row still holds
	stagedInsert string // $1 table name: the new rows of the meta stage
}

func newPgMetaSQL(table string) *pgMetaSQL {
	t := pgx.Identifier{table}.Sanitize()
	cols := pgMetaTableSpec(table).columns
	names := make([]string, len(cols))
	params := make([]string, len(cols))
	var sets []string
	for i, c := range cols {
		names[i] = c.name
		params[i] = fmt.Sprintf("$%d", i+1)
		if c.name != "resource_id" {
			sets = append(sets, c.name+" = EXCLUDED."+c.name)
		}
	}
	setStaged := make([]string, 0, len(cols)-1)
	for _, c := range cols[1:] {
		setStaged = append(setStaged, c.name+" = s."+c.name)
	}
	return &pgMetaSQL{
		stagedUpdate: "UPDATE " + t + " AS m SET " + strings.Join(setStaged, ", ") + "\n" +
			"FROM pg_temp.specstar_stage_meta s\n" +
			"WHERE s.tbl = $1 AND s.prev IS NOT NULL AND m.resource_id = s.resource_id AND m.data = s.prev",
		stagedInsert: "INSERT INTO " + t + " (" + strings.Join(names, ", ") + ")\n" +
			"SELECT " + strings.Join(names, ", ") + " FROM pg_temp.specstar_stage_meta\n" +
			"WHERE tbl = $1 AND prev IS NULL ORDER BY resource_id\n" +
			"ON CONFLICT (resource_id) DO NOTHING",
		table:      table,
		selectOne:  "SELECT data FROM " + t + " WHERE resource_id = $1",
		selectMany: "SELECT resource_id, data FROM " + t + " WHERE resource_id = ANY($1::text[])",
		upsert: "INSERT INTO " + t + " AS m (" + strings.Join(names, ", ") + ")\nVALUES (" + strings.Join(params, ", ") + ")\n" +
			"ON CONFLICT (resource_id) DO UPDATE SET " + strings.Join(sets, ", ") + "\n" +
			fmt.Sprintf("WHERE m.data = $%d", len(cols)+1),
	}
}

// pgRevSQL holds the statements of the resource tables.
type pgRevSQL struct {
	selectSlots      string // $1, $2, $3 parallel arrays of keys -> (resource_id, revision_id, schema_version, uid)
	selectData       string // $1 uids -> (uid, data, info)
	selectDataShared string // the same, the rows locked FOR SHARE in uid order
	upsertData       string // $1 uid, $2 data, $3 info; $4, $5 the data and info the row must still hold (NULL: no row)
	upsertSlot       string // $1..$3 key, $4 uid; $5 the uid the row must still name (NULL: no row)
	readOne          string // $1..$3 key -> (info, data)

	// the staged (COPY) forms of upsertData and upsertSlot
	stagedDataUpdate, stagedDataInsert, stagedSlotUpdate, stagedSlotInsert string
}

func newPgRevSQL(dataTable, indexTable string) *pgRevSQL {
	d := pgx.Identifier{dataTable}.Sanitize()
	x := pgx.Identifier{indexTable}.Sanitize()
	return &pgRevSQL{
		selectSlots: "SELECT ri.resource_id, ri.revision_id, ri.schema_version, ri.uid FROM " + x + " AS ri\n" +
			"JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(r, v, s)\n" +
			"  ON ri.resource_id = k.r AND ri.revision_id = k.v AND ri.schema_version = k.s",
		selectData:       "SELECT uid, data, info FROM " + d + " WHERE uid = ANY($1::text[])",
		selectDataShared: "SELECT uid, data, info FROM " + d + " WHERE uid = ANY($1::text[]) ORDER BY uid FOR SHARE",
		upsertData: "INSERT INTO " + d + " AS rd (uid, data, info) VALUES ($1, $2, $3)\n" +
			"ON CONFLICT (uid) DO UPDATE SET data = EXCLUDED.data, info = EXCLUDED.info\n" +
			"WHERE rd.data = $4 AND rd.info = $5",
		upsertSlot: "INSERT INTO " + x + " AS ri (resource_id, revision_id, schema_version, uid) VALUES ($1, $2, $3, $4)\n" +
			"ON CONFLICT (resource_id, revision_id, schema_version) DO UPDATE SET uid = EXCLUDED.uid\n" +
			"WHERE ri.uid = $5",
		stagedDataUpdate: "UPDATE " + d + " AS rd SET data = s.data, info = s.info FROM pg_temp.specstar_stage_data s\n" +
			"WHERE s.prev_info IS NOT NULL AND rd.uid = s.uid AND rd.data = s.prev_data AND rd.info = s.prev_info",
		stagedDataInsert: "INSERT INTO " + d + " (uid, data, info)\n" +
			"SELECT uid, data, info FROM pg_temp.specstar_stage_data WHERE prev_info IS NULL ORDER BY uid\n" +
			"ON CONFLICT (uid) DO NOTHING",
		stagedSlotUpdate: "UPDATE " + x + " AS ri SET uid = s.uid FROM pg_temp.specstar_stage_slot s\n" +
			"WHERE s.prev IS NOT NULL AND ri.resource_id = s.resource_id AND ri.revision_id = s.revision_id\n" +
			"  AND ri.schema_version = s.schema_version AND ri.uid = s.prev",
		stagedSlotInsert: "INSERT INTO " + x + " (resource_id, revision_id, schema_version, uid)\n" +
			"SELECT resource_id, revision_id, schema_version, uid FROM pg_temp.specstar_stage_slot\n" +
			"WHERE prev IS NULL ORDER BY resource_id, revision_id, schema_version\n" +
			"ON CONFLICT (resource_id, revision_id, schema_version) DO NOTHING",
		readOne: "SELECT rd.info, rd.data FROM " + x + " AS ri JOIN " + d + " AS rd ON rd.uid = ri.uid\n" +
			"WHERE ri.resource_id = $1 AND ri.revision_id = $2 AND ri.schema_version = $3",
	}
}

// pgStageDDL creates (once per session) and empties the staging tables of
// COPY writes. They are temporary (pg_temp: private to the session, never
// seen by SpecStar) and emptied at commit as well.
const pgStageDDL = `CREATE TEMP TABLE IF NOT EXISTS specstar_stage_meta (
    tbl text, resource_id text, data bytea, created_time timestamp, updated_time timestamp,
    created_by text, updated_by text, is_deleted boolean, schema_version text, indexed_data jsonb,
    rev_status text, rev_created_by text, rev_updated_by text, rev_created_time timestamp,
    rev_updated_time timestamp, prev bytea) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS specstar_stage_data (
    uid text, data bytea, info bytea, prev_data bytea, prev_info bytea) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS specstar_stage_slot (
    resource_id text, revision_id text, schema_version text, uid text, prev text) ON COMMIT DELETE ROWS;
TRUNCATE pg_temp.specstar_stage_meta, pg_temp.specstar_stage_data, pg_temp.specstar_stage_slot`
