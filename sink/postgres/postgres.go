// Package postgres is the sink backend for a SpecStar Postgres deployment:
// it reads back, lists and purges what it writes, and parses the
// postgres:// sink URL. Its Sink writes what SpecStar's PostgresMetaStore
// and PostgresResourceStore write:
//
//	{prefix}{model}_meta      one row per resource (the contract's meta table; the name is a template)
//	{prefix}resource_data     uid -> payload bytes and RevisionInfo (only with Revisions)
//	{prefix}resource_index    (resource_id, revision_id, schema_version or '__none__') -> uid
//
// Apply validates a record (everything Postgres would refuse is refused
// here, as an *InvalidError, so that no record can make a Flush fail
// forever) and queues it; Flush applies the queue in one transaction.
package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Options choose the tables and the encoding a Postgres sink
// writes, so that they match the SpecStar deployment that reads them.
type Options struct {
	// Encoding is that of the meta `data` column and the resource `info`
	// column. UNSET (the zero value) means events.Msgpack, what SpecStar's
	// Postgres storage factories write; events.Some(events.JSON) selects
	// JSON. (An Opt rather than a bare events.Encoding because the bare
	// zero value would be JSON.)
	Encoding events.Opt[events.Encoding]
	// MetaTable names a model's meta table; "{model}" is replaced by the
	// model name. "" means "{model}_meta", SpecStar's factory naming.
	// Without "{model}" every model shares one table (right only when one
	// model is replicated: resource ids of different models would collide).
	MetaTable string
	// TablePrefix is SpecStar's table_prefix, put before the meta table
	// and before resource_data / resource_index. Letters, digits and "_".
	TablePrefix string
	// Revisions also stores revisions, in {prefix}resource_data and
	// {prefix}resource_index (a PostgresResourceStore). Off, ApplyRevision
	// ignores revisions (they go to an S3 or disk sink configured beside).
	Revisions bool
	// OnDuplicate is "" (a meta replaces the stored one only if newer, the
	// default), or SpecStar's archive-restore strategies "overwrite",
	// "skip", "raise_error", with the Disk sink's meaning. "skip" and
	// "raise_error" decide at Apply (one read per meta); a different meta
	// that another writer stores between that Apply and the Flush is kept.
	OnDuplicate string
	// ReadOnly opens the sink to read it back (verify): it takes no writer
	// lock, so it neither waits for nor blocks a restore.
	ReadOnly bool
}

// Sink is a sink writing SpecStar's Postgres meta store (and, as an
// option, its Postgres resource store). It is safe for concurrent use:
// Apply calls only validate and queue; Flush writes the queue in one
// transaction whose every write is a compare-and-swap on the row its
// newer-wins decision was taken on, so several replicators may write one
// database at the same time without ever rolling a row back.
//
// An Outcome from ApplyMeta or ApplyRevision is known only as far as it
// can be without the database: Written means "queued" (Flush writes it
// unless the database already holds it or something newer, which makes it
// a no-op there); Skipped and errors are final. Blobs are never held.
type Sink struct {
	pool       *pgxpool.Pool
	opts       Options
	enc        events.Encoding
	metaTmpl   string
	dataTable  string // {prefix}resource_data
	indexTable string // {prefix}resource_index
	rev        *pgRevSQL
	lock       *writerLock // the writer lock's session; nil when ReadOnly
	copyFrom   int         // a round writing this many rows or more uses COPY staging

	// fresh: the last Flush's read found none of the rows it touches
	// (a new sink catching up), so the next one of copyFrom records or
	// more writes without reading first. Guarded by flushMu.
	fresh bool

	tableLocks store.KeyLocks // one schema check per meta table at a time
	flushMu    sync.Mutex     // one Flush at a time
	// roundRefused is what the last round decided not to write (a uid
	// another resource holds); guarded by flushMu.
	roundRefused []store.Refusal

	mu        sync.Mutex
	closed    bool
	queue     []pgWrite                      // applied since the last Seal
	sealed    []pgWrite                      // applied before it, not yet written
	refused   []store.Refusal                // refused by flushes since TakeRefusals
	tables    map[string]*pgMetaSQL          // meta tables checked (or created), by name
	lostRev   bool                           // a Flush found a resource table missing
	firstMeta map[pgMetaKey][]byte           // skip / raise_error: the first meta queued per resource
	skipped   map[string]map[string]struct{} // OnDuplicate "skip": model -> resource ids whose meta was skipped
}

// pgWrite is one queued record: exactly one of meta, rev and purge is set.
type pgWrite struct {
	meta  *pgMetaWrite
	rev   *pgRevWrite
	purge *pgPurgeWrite
}

// pgMetaKey is a meta row: its table and resource id.
type pgMetaKey struct{ table, rid string }

// pgMetaWrite is a meta ready to be written: its row (the 14 columns, data
// second) and what orders it against another meta of the resource.
type pgMetaWrite struct {
	model   string
	key     pgMetaKey
	sql     *pgMetaSQL
	row     []any
	data    []byte
	updated time.Time
	count   int64
}

// pgSlotKey is a resource_index row's key, schema_version as stored.
type pgSlotKey struct{ rid, revID, sv string }

// pgRevWrite is a revision ready to be written.
type pgRevWrite struct {
	info      events.RevisionInfo // without Unknown: only ordering fields are used
	infoBytes []byte
	data      []byte
	slot      pgSlotKey
}

// pgNoneSchema is PostgresResourceStore's stand-in for a None
// schema_version in resource_index, whose primary key cannot hold NULL.
const pgNoneSchema = "__none__"

// pgMaxIdent is the longest identifier Postgres keeps (NAMEDATALEN-1
// bytes); longer ones are silently truncated, so they are refused.
const pgMaxIdent = 63

// pgMaxIndexed bounds a text value in a btree-indexed column: a btree
// entry must fit in about a third of a page (2704 bytes), and a value that
// does not would fail the whole Flush.
const pgMaxIndexed = 2000

// pgMaxSlotKey bounds the three columns of resource_index's primary key
// together, for the same reason.
const pgMaxSlotKey = 2600

// pgMaxRounds bounds how often one Flush re-reads rows that other writers
// changed between its read and its write.
const pgMaxRounds = 8

// Open connects to dsn (a libpq URL or key=value string; pool
// settings such as pool_max_conns are accepted) and, with Revisions,
// creates or upgrades the resource tables; meta tables are created or
// upgraded the first time a model is seen. It is the one way to get a
// Postgres. Errors about options are *InvalidError.
func Open(ctx context.Context, dsn string, opts Options) (*Sink, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	enc := events.Msgpack
	if opts.Encoding.Present {
		if opts.Encoding.Null {
			return nil, errors.New("sink: postgres encoding is None (leave it UNSET for msgpack)")
		}
		enc = opts.Encoding.Value
	}
	switch enc {
	case events.JSON, events.Msgpack:
	default:
		return nil, fmt.Errorf("sink: unknown encoding %v", enc)
	}
	switch opts.OnDuplicate {
	case store.DupNewer, store.DupOverwrite, store.DupSkip, store.DupRaise:
	default:
		return nil, fmt.Errorf("sink: unknown on-duplicate strategy %q (want \"\", %q, %q or %q)",
			opts.OnDuplicate, store.DupOverwrite, store.DupSkip, store.DupRaise)
	}
	tmpl := opts.MetaTable
	if tmpl == "" {
		tmpl = "{model}_meta"
	}
	if err := pgCheckConfigName("table prefix", opts.TablePrefix, false); err != nil {
		return nil, err
	}
	if err := pgCheckConfigName("meta table template", tmpl, true); err != nil {
		return nil, err
	}
	if !strings.Contains(tmpl, "{model}") {
		if err := pgCheckTableName(opts.TablePrefix+tmpl, "meta table"); err != nil {
			return nil, err
		}
	}
	p := &Sink{
		opts:       opts,
		enc:        enc,
		metaTmpl:   tmpl,
		dataTable:  opts.TablePrefix + "resource_data",
		indexTable: opts.TablePrefix + "resource_index",
		tables:     map[string]*pgMetaSQL{},
		firstMeta:  map[pgMetaKey][]byte{},
		skipped:    map[string]map[string]struct{}{},
		copyFrom:   pgCopyFrom,
	}
	for _, name := range []string{p.dataTable, p.indexTable} {
		if err := pgCheckTableName(name, "resource table"); err != nil {
			return nil, err
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("sink: postgres connect to %s@%s:%d/%s: %w",
			cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	p.pool = pool
	if opts.Revisions {
		if err := p.dropMarksIfNew(ctx); err != nil {
			pool.Close()
			return nil, err
		}
		if err := pgEnsureResourceTables(ctx, pool, p.dataTable, p.indexTable); err != nil {
			pool.Close()
			return nil, err
		}
	}
	p.rev = newPgRevSQL(p.dataTable, p.indexTable)
	if !opts.ReadOnly {
		if err := p.takeWriterLock(ctx, cfg.ConnConfig); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return p, nil
}

// pgCheckConfigName validates a configured name part: ASCII letters,
// digits and "_" (and the {model} placeholder in a template), so that the
// names are plain and never need more than quoting.
func pgCheckConfigName(what, s string, template bool) error {
	rest := s
	if template {
		rest = strings.ReplaceAll(s, "{model}", "")
		if rest == "" && s == "" {
			return store.Invalid(fmt.Sprintf("%s %q", what, s), "empty")
		}
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return store.Invalidf(fmt.Sprintf("%s %q", what, s), "character %q is not an ASCII letter, digit or '_'", c)
		}
	}
	return nil
}

// pgCheckTableName refuses a table name Postgres would truncate.
func pgCheckTableName(name, what string) error {
	if name == "" {
		return store.Invalid(fmt.Sprintf("%s %q", what, name), "empty")
	}
	if len(name) > pgMaxIdent {
		return store.Invalidf(fmt.Sprintf("%s %q", what, name),
			"%d bytes, longer than a Postgres identifier may be (%d; longer names are truncated)", len(name), pgMaxIdent)
	}
	return nil
}

// metaTable returns the meta table of a model, validating the model name
// as a part of a table name: letters, digits, "_" and "-" only.
func (p *Sink) metaTable(model string) (string, error) {
	key := fmt.Sprintf("model %q", model)
	if model == "" {
		return "", store.Invalid(key, "empty")
	}
	if !utf8.ValidString(model) {
		return "", store.Invalid(key, "not valid UTF-8")
	}
	for _, r := range model {
		if !(r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return "", store.Invalidf(key, "character %q cannot be part of a table name here (letters, digits, '_' and '-' can)", r)
		}
	}
	name := p.opts.TablePrefix + strings.ReplaceAll(p.metaTmpl, "{model}", model)
	if len(name) > pgMaxIdent {
		return "", store.Invalidf(key, "meta table name %q is %d bytes, longer than a Postgres identifier may be (%d)",
			name, len(name), pgMaxIdent)
	}
	return name, nil
}

// metaSQL returns the statements of a model's meta table, creating or
// upgrading the table the first time.
func (p *Sink) metaSQL(ctx context.Context, table string) (*pgMetaSQL, error) {
	p.mu.Lock()
	s := p.tables[table]
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	unlock := p.tableLocks.Lock(table)
	defer unlock()
	p.mu.Lock()
	s = p.tables[table]
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	if err := pgEnsureMetaTable(ctx, p.pool, table); err != nil {
		return nil, err
	}
	s = newPgMetaSQL(table)
	p.mu.Lock()
	p.tables[table] = s
	p.mu.Unlock()
	return s, nil
}

// readSQL returns the statements of a meta table for reading, which
// changes nothing in the database (a missing table reads as not-exist).
func (p *Sink) readSQL(table string) *pgMetaSQL {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.tables[table]; s != nil {
		return s
	}
	return newPgMetaSQL(table)
}

// EnsureModel creates or upgrades a model's meta table now rather than at
// its first record, so that a deployment can check its schema at startup.
func (p *Sink) EnsureModel(ctx context.Context, model string) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	table, err := p.metaTable(model)
	if err != nil {
		return err
	}
	_, err = p.metaSQL(ctx, table)
	return err
}

func (p *Sink) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("sink: postgres sink is closed")
	}
	return nil
}

// ---------------------------------------------------------------- metas

// ApplyMeta validates a ResourceMeta and queues it for the next Flush,
// returning Written ("queued"). Flush writes it only if it is newer than
// the stored row (updated_time as an instant, naive read as UTC, then
// total_revision_count, then the encoded bytes, as the Disk sink), so a
// replayed or older meta is a no-op there. With OnDuplicate "skip" or
// "raise_error" the stored row (or a meta queued earlier) is read now: an
// identical meta gives Unchanged, a different one Skipped (and the
// resource's later revisions are skipped) or an *InvalidError.
func (p *Sink) ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error) {
	if err := p.check(ctx); err != nil {
		return 0, err
	}
	if meta == nil {
		return 0, store.Invalid("meta", "nil")
	}
	table, err := p.metaTable(model)
	if err != nil {
		return 0, err
	}
	key := fmt.Sprintf("meta %q", meta.ResourceID)
	if meta.ResourceID == "" {
		return 0, store.Invalid(key, "empty resource_id")
	}
	encoded, err := meta.Encode(p.enc)
	if err != nil {
		return 0, store.Invalidf(key, "cannot be encoded in %v: %v", p.enc, err)
	}
	row, err := pgMetaRow(meta, encoded)
	if err != nil {
		return 0, err
	}
	s, err := p.metaSQL(ctx, table)
	if err != nil {
		return 0, err
	}
	w := &pgMetaWrite{
		model:   model,
		key:     pgMetaKey{table, meta.ResourceID},
		sql:     s,
		row:     row,
		data:    encoded,
		updated: meta.UpdatedTime.Instant(),
		count:   meta.TotalRevisionCount,
	}
	if p.opts.OnDuplicate == store.DupSkip || p.opts.OnDuplicate == store.DupRaise {
		return p.queueDuplicateChecked(ctx, w)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, pgWrite{meta: w})
	return store.Written, nil
}

// queueDuplicateChecked queues a meta under OnDuplicate "skip" or
// "raise_error", which need to know now whether a different meta of the
// resource exists: stored, or queued earlier in this run.
func (p *Sink) queueDuplicateChecked(ctx context.Context, w *pgMetaWrite) (store.Outcome, error) {
	var stored []byte
	err := p.pool.QueryRow(ctx, w.sql.selectOne, w.key.rid).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		stored, err = nil, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sink: postgres read %s row %q: %w", w.key.table, w.key.rid, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	existing := stored
	if existing == nil {
		existing = p.firstMeta[w.key]
	}
	switch {
	case existing == nil:
		p.firstMeta[w.key] = w.data
		p.queue = append(p.queue, pgWrite{meta: w})
		return store.Written, nil
	case bytes.Equal(existing, w.data):
		return store.Unchanged, nil
	case p.opts.OnDuplicate == store.DupSkip:
		m := p.skipped[w.model]
		if m == nil {
			m = map[string]struct{}{}
			p.skipped[w.model] = m
		}
		m[w.key.rid] = struct{}{}
		return store.Skipped, nil
	}
	return 0, store.Invalid(fmt.Sprintf("meta %q", w.key.rid), "a different meta already exists (on_duplicate=raise_error)")
}

// pgMetaRow is the meta table's 14 columns for a meta, in the contract's
// order. Times are the instant in UTC (naive read as UTC), written to
// TIMESTAMP (without time zone) columns. indexed_data is msgspec's JSON of
// the map (datetimes as ISO 8601 strings, bytes as base64, non-finite
// floats as null), SQL NULL when UNSET and JSON null when None. Anything
// Postgres would refuse (NUL or invalid UTF-8 in text, a btree key too
// long, a time out of range) is an *InvalidError.
func pgMetaRow(meta *events.ResourceMeta, encoded []byte) ([]any, error) {
	key := fmt.Sprintf("meta %q", meta.ResourceID)
	texts := []struct {
		name string
		v    string
		max  int
	}{
		{"resource_id", meta.ResourceID, pgMaxIndexed},
		{"created_by", meta.CreatedBy, pgMaxIndexed},
		{"updated_by", meta.UpdatedBy, pgMaxIndexed},
		{"schema_version", meta.SchemaVersion.Value, 0},
		{"rev_status", meta.RevStatus.Value, pgMaxIndexed},
		{"rev_created_by", meta.RevCreatedBy.Value, pgMaxIndexed},
		{"rev_updated_by", meta.RevUpdatedBy.Value, pgMaxIndexed},
	}
	for _, t := range texts {
		if err := pgCheckText(key, t.name, t.v, t.max); err != nil {
			return nil, err
		}
	}
	times := []struct {
		name string
		v    events.Opt[events.Time]
	}{
		{"created_time", events.Some(meta.CreatedTime)},
		{"updated_time", events.Some(meta.UpdatedTime)},
		{"rev_created_time", meta.RevCreatedTime},
		{"rev_updated_time", meta.RevUpdatedTime},
	}
	for _, t := range times {
		if t.v.IsSet() {
			if y := t.v.Value.Instant().Year(); y < 1 || y > 9999 {
				return nil, store.Invalidf(key, "%s %s is outside Python's datetime range (years 1 to 9999)", t.name, t.v.Value.Format())
			}
		}
	}
	var indexed any
	if meta.IndexedData.Present {
		var v events.Value
		if !meta.IndexedData.Null {
			v = meta.IndexedData.Value
			if err := pgCheckValue(key, v, 0); err != nil {
				return nil, err
			}
		}
		b, err := events.EncodeValue(events.JSON, v)
		if err != nil {
			return nil, store.Invalidf(key, "indexed_data cannot be stored as JSON: %v", err)
		}
		indexed = string(b)
	}
	optStr := func(o store.OptString) any {
		if o.IsSet() {
			return o.Value
		}
		return nil
	}
	optTime := func(o events.Opt[events.Time]) any {
		if o.IsSet() {
			return o.Value.Instant()
		}
		return nil
	}
	return []any{
		meta.ResourceID,
		encoded,
		meta.CreatedTime.Instant(),
		meta.UpdatedTime.Instant(),
		meta.CreatedBy,
		meta.UpdatedBy,
		meta.IsDeleted,
		optStr(meta.SchemaVersion),
		indexed,
		optStr(meta.RevStatus),
		optStr(meta.RevCreatedBy),
		optStr(meta.RevUpdatedBy),
		optTime(meta.RevCreatedTime),
		optTime(meta.RevUpdatedTime),
	}, nil
}

// pgCheckText refuses what a Postgres text column cannot hold (NUL,
// invalid UTF-8) and, when max > 0, what a btree index cannot.
func pgCheckText(key, field, s string, max int) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return store.Invalidf(key, "%s contains NUL, which Postgres text cannot hold", field)
	case !utf8.ValidString(s):
		return store.Invalidf(key, "%s is not valid UTF-8", field)
	case max > 0 && len(s) > max:
		return store.Invalidf(key, "%s is %d bytes, more than a Postgres index entry can hold (%d)", field, len(s), max)
	}
	return nil
}

// pgCheckValue refuses strings jsonb cannot hold (NUL, invalid UTF-8)
// anywhere in an indexed_data value.
func pgCheckValue(key string, v events.Value, depth int) error {
	if depth > 1000 {
		return store.Invalid(key, "indexed_data nests too deep")
	}
	switch x := v.(type) {
	case string:
		return pgCheckText(key, "a string in indexed_data", x, 0)
	case []any:
		for _, e := range x {
			if err := pgCheckValue(key, e, depth+1); err != nil {
				return err
			}
		}
	case events.Map:
		for _, it := range x {
			if err := pgCheckValue(key, it.Key, depth+1); err != nil {
				return err
			}
			if err := pgCheckValue(key, it.Value, depth+1); err != nil {
				return err
			}
		}
	case events.Struct:
		for _, f := range x.Fields {
			if err := pgCheckText(key, "a field name in indexed_data", f.Name, 0); err != nil {
				return err
			}
			if err := pgCheckValue(key, f.Value, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Sink) isSkipped(model, resourceID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.skipped[model][resourceID]
	return ok
}

// ------------------------------------------------------------- revisions

// ApplyRevision validates a revision and queues it for the next Flush,
// returning Written ("queued"). Flush writes {prefix}resource_data[uid]
// and points the (resource_id, revision_id, schema_version) row of
// {prefix}resource_index at the uid, with the Disk sink's rules: a uid
// stored with other content keeps the newer (a migration beats the
// version it came from, else the later updated_time, else the greater
// info bytes), and a slot naming another uid moves only to a newer
// revision. Without Revisions it returns Unchanged and does nothing: the
// revisions live in another sink. The model only selects the skip set:
// SpecStar's resource tables are shared by the models of a prefix.
func (p *Sink) ApplyRevision(ctx context.Context, model string, res *events.RawResource) (store.Outcome, error) {
	if err := p.check(ctx); err != nil {
		return 0, err
	}
	if !p.opts.Revisions {
		return store.Unchanged, nil
	}
	if res == nil {
		return 0, store.Invalid("revision", "nil")
	}
	info := &res.Info
	if _, err := p.metaTable(model); err != nil {
		return 0, err
	}
	if err := store.CheckUID(info.UID); err != nil {
		return 0, err
	}
	key := fmt.Sprintf("revision %q", info.UID)
	if info.ResourceID == "" {
		return 0, store.Invalid(key, "empty resource_id")
	}
	if info.RevisionID == "" {
		return 0, store.Invalid(key, "empty revision_id")
	}
	sv := pgNoneSchema
	if info.SchemaVersion.IsSet() {
		if info.SchemaVersion.Value == pgNoneSchema {
			return 0, store.Invalidf(key, "schema_version %q is PostgresResourceStore's stand-in for None", pgNoneSchema)
		}
		sv = info.SchemaVersion.Value
	}
	for _, f := range []struct{ name, v string }{
		{"resource_id", info.ResourceID}, {"revision_id", info.RevisionID}, {"schema_version", sv},
	} {
		if err := pgCheckText(key, f.name, f.v, pgMaxIndexed); err != nil {
			return 0, err
		}
	}
	if n := len(info.ResourceID) + len(info.RevisionID) + len(sv); n > pgMaxSlotKey {
		return 0, store.Invalidf(key, "resource_id, revision_id and schema_version are %d bytes together, more than a Postgres index entry can hold (%d)", n, pgMaxSlotKey)
	}
	if p.opts.OnDuplicate == store.DupSkip && p.isSkipped(model, info.ResourceID) {
		return store.Skipped, nil
	}
	infoBytes, err := info.Encode(p.enc)
	if err != nil {
		return 0, store.Invalidf(key, "info cannot be encoded in %v: %v", p.enc, err)
	}
	w := &pgRevWrite{
		info:      *info,
		infoBytes: infoBytes,
		data:      bytes.Clone(res.RawData),
		slot:      pgSlotKey{info.ResourceID, info.RevisionID, sv},
	}
	w.info.Unknown = events.Unknown{}
	if w.data == nil {
		w.data = []byte{} // data is NOT NULL
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, pgWrite{rev: w})
	return store.Written, nil
}

// ApplyBlob reads data to its end and returns Unchanged: SpecStar's
// Postgres stores hold no blobs (its deployments keep them in S3 or on
// disk), so blobs go to a disk or S3 sink configured beside this one.
func (p *Sink) ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (store.Outcome, error) {
	if err := p.check(ctx); err != nil {
		return 0, err
	}
	if data != nil {
		if _, err := io.Copy(io.Discard, store.CtxReader{Ctx: ctx, R: data}); err != nil {
			return 0, fmt.Errorf("sink: postgres: drain blob %q: %w", fileID, err)
		}
	}
	return store.Unchanged, nil
}

// ----------------------------------------------------------------- flush

// Flush writes everything applied since the last successful Flush in ONE
// transaction; the caller acks only after it returns nil. Its errors are
// transient (connection, deadlock, serialization): the queue is kept, and
// a retried Flush executes it again, which is safe because every write is
// idempotent. Permanent problems were refused by Apply.
//
// How: the rows the queue touches are read (one batch); the Disk sink's
// rules decide, in Go and in queue order, what each row becomes
// (total_revision_count and parent_schema_version live only inside the
// encoded bytes, so the order cannot be a comparison of columns); the rows
// that change are written, in key order, by INSERT ... ON CONFLICT DO
// UPDATE ... WHERE <the row still holds the bytes the decision was taken
// on>: a compare-and-swap, which Postgres evaluates on the latest version
// of the row after locking it. If another writer changed or created a row
// in between, that statement writes nothing and the rows are read and
// decided again, in the same transaction. So no concurrent writer is ever
// rolled back, and a row that is already right is neither written nor
// locked (its xmin stays). Deadlocks between writers are possible in
// principle (Postgres breaks them by failing one transaction): a transient
// error, as above.
func (p *Sink) Flush(ctx context.Context) error {
	return p.flush(ctx, true)
}

// flush writes what was sealed and, with all, what was applied since.
func (p *Sink) flush(ctx context.Context, all bool) error {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("sink: postgres sink is closed")
	}
	pending := p.sealed
	p.sealed = nil
	if all {
		pending = append(pending, p.queue...)
		p.queue = nil
	}
	p.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	err := p.ensureTables(ctx, pending)
	if err == nil {
		err = p.execute(ctx, pending)
	}
	if err != nil {
		p.mu.Lock()
		// in front of what was sealed meanwhile (by then the next
		// batch), and sealed: the retry writes it first
		p.sealed = append(pending, p.sealed...)
		if pgUndefined(err) {
			// A table was dropped behind our back: the next Flush
			// creates it again rather than failing forever.
			clear(p.tables)
			p.lostRev = true
		}
		p.mu.Unlock()
		return err
	}
	p.mu.Lock()
	p.refused = append(p.refused, p.roundRefused...)
	for _, w := range pending {
		if w.meta != nil {
			delete(p.firstMeta, w.meta.key) // now stored, where the check reads it
		}
	}
	p.mu.Unlock()
	return nil
}

// OverlapsFlush reports that this sink can write one batch while the
// next is applied (sink.Overlapper): Apply only queues, and a Flush takes
// what it writes from the queue at its start, giving back in front what
// it could not write. Not with OnDuplicate "skip" or "raise_error", whose
// Apply reads the stored meta and the metas queued but not yet stored,
// which a Flush running beside it moves from one to the other.
func (p *Sink) OverlapsFlush() bool {
	return p.opts.OnDuplicate != store.DupSkip && p.opts.OnDuplicate != store.DupRaise
}

// TakeRefusals returns the revisions the flushes since the last call
// refused (sink.Refuser), each a uid another resource holds, once.
func (p *Sink) TakeRefusals() []store.Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.refused
	p.refused = nil
	return out
}

// Seal ends a batch: what was applied until now is what FlushSealed
// writes (sink.Overlapper); what is applied from now on waits for the next
// Seal, or a Flush.
func (p *Sink) Seal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sealed = append(p.sealed, p.queue...)
	p.queue = nil
}

// FlushSealed is Flush for what was applied before the last Seal only
// (sink.Overlapper), so that a batch is written while the next one is
// being applied.
func (p *Sink) FlushSealed(ctx context.Context) error {
	return p.flush(ctx, false)
}

// ensureTables makes sure the tables the queue writes exist: they were
// checked when the first record of each was applied, and are checked again
// after a Flush found one missing.
func (p *Sink) ensureTables(ctx context.Context, pending []pgWrite) error {
	p.mu.Lock()
	lostRev := p.lostRev
	p.mu.Unlock()
	seen := map[string]bool{}
	hasRev := false
	for _, w := range pending {
		table := ""
		switch {
		case w.meta != nil:
			table = w.meta.key.table
		case w.purge != nil:
			table = w.purge.key.table
			hasRev = hasRev || p.opts.Revisions
		default:
			hasRev = true
			continue
		}
		if !seen[table] {
			seen[table] = true
			if _, err := p.metaSQL(ctx, table); err != nil {
				return err
			}
		}
	}
	if hasRev && lostRev {
		if err := pgEnsureResourceTables(ctx, p.pool, p.dataTable, p.indexTable); err != nil {
			return err
		}
		p.mu.Lock()
		p.lostRev = false
		p.mu.Unlock()
	}
	return nil
}

// execute runs one transaction: rounds of read-decide-write until no
// compare-and-swap misses, then commit. While the sink is fresh (the last
// read found none of its rows: a backlog into a new database), a large
// queue without purges is first decided as if none of its rows existed,
// without reading: every row it touches is then new and written by COPY
// (copyGuessed, with no savepoint), which fails on a key that exists
// after all, so the decision stands only if it was right; else the
// transaction is rolled back and done again, reading first.
func (p *Sink) execute(ctx context.Context, pending []pgWrite) error {
	blind := p.fresh && len(pending) >= p.copyFrom
	for _, w := range pending {
		blind = blind && w.purge == nil
	}
	var tx pgx.Tx // begun by the first round's read batch
	defer func() {
		if tx != nil {
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	for round := 1; ; round++ {
		missed, err := p.round(ctx, &tx, pending, !blind || round > 1)
		if errors.Is(err, errGuessedWrong) {
			// A row the blind round took for new exists: its COPY failed
			// and took the transaction with it. Again, reading first.
			if rerr := tx.Rollback(ctx); rerr != nil {
				return fmt.Errorf("sink: postgres rollback: %w", rerr)
			}
			tx, blind, p.fresh, round = nil, false, false, 0
			continue
		}
		if err != nil {
			return err
		}
		if missed == 0 {
			break
		}
		if round == pgMaxRounds {
			return fmt.Errorf("sink: postgres: %d rows kept changing under concurrent writers after %d rounds", missed, round)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sink: postgres commit: %w", err)
	}
	return nil
}

// pgMetaState is one meta row during a round: as read, and as decided.
type pgMetaState struct {
	sql     *pgMetaSQL
	orig    []byte // nil: no row
	cur     []byte
	row     []any // the columns to write, if cur is not orig
	ordered bool  // updated and count are known (cur decodes)
	updated time.Time
	count   int64
}

// pgDataState is one resource_data row during a round.
type pgDataState struct {
	origData, origInfo []byte // nil: no row
	data, info         []byte
	decoded            *events.RevisionInfo // info decoded; nil if it does not decode
	purged             bool                 // a purge removed it (unless a later revision wrote info again)
}

// pgSlotState is one resource_index row during a round.
type pgSlotState struct{ orig, cur string } // "" = no row

// round reads the rows the queue touches, decides, and writes the rows
// that change; it returns how many compare-and-swaps missed. *tx is nil
// in the first round, whose read batch begins the transaction (saving a
// round trip). Without read it decides as if none of the rows existed
// (see execute).
//
// The reads take no locks: every decision depends only on the row it
// writes, whose write is a compare-and-swap, except one: a resource_index
// row naming another uid moves only if the revision supersedes that uid's
// info, so those rows are read again FOR SHARE and cannot change until
// commit. Rows that end unchanged are neither written nor locked.
func (p *Sink) round(ctx context.Context, tx *pgx.Tx, pending []pgWrite, read bool) (int, error) {
	// Sized for the queue: a backlog's batch holds thousands of rows, and
	// growing these maps showed in the profile of a drain.
	metas := make(map[pgMetaKey]*pgMetaState, len(pending)/8)
	slots := make(map[pgSlotKey]*pgSlotState, len(pending))
	datas := make(map[string]*pgDataState, len(pending))
	byTable := map[string][]string{}
	tableSQL := map[string]*pgMetaSQL{}
	purgeRids := map[string]bool{}
	for _, w := range pending {
		switch {
		case w.purge != nil:
			if _, ok := metas[w.purge.key]; !ok {
				metas[w.purge.key] = &pgMetaState{sql: w.purge.sql}
				byTable[w.purge.key.table] = append(byTable[w.purge.key.table], w.purge.key.rid)
				tableSQL[w.purge.key.table] = w.purge.sql
			}
			if p.opts.Revisions {
				purgeRids[w.purge.key.rid] = true
			}
		case w.meta != nil:
			if _, ok := metas[w.meta.key]; !ok {
				metas[w.meta.key] = &pgMetaState{sql: w.meta.sql}
				byTable[w.meta.key.table] = append(byTable[w.meta.key.table], w.meta.key.rid)
				tableSQL[w.meta.key.table] = w.meta.sql
			}
		case w.rev != nil:
			if _, ok := slots[w.rev.slot]; !ok {
				slots[w.rev.slot] = &pgSlotState{}
			}
			if _, ok := datas[w.rev.info.UID]; !ok {
				datas[w.rev.info.UID] = &pgDataState{}
			}
		}
	}

	var err error
	if !read {
		if *tx == nil {
			if *tx, err = p.pool.Begin(ctx); err != nil {
				return 0, fmt.Errorf("sink: postgres begin: %w", err)
			}
		}
	} else {
		if err := p.read(ctx, tx, pending, metas, slots, datas, byTable, tableSQL, purgeRids); err != nil {
			return 0, err
		}
		p.fresh = pgNoneRead(metas, slots, datas)
	}

	// Decide, in queue order, as the Disk sink would apply the records.
	p.roundRefused = p.roundRefused[:0]
	for _, st := range metas {
		st.cur = st.orig
		if st.orig != nil {
			if m, err := events.DecodeResourceMeta(p.enc, st.orig); err == nil {
				st.ordered, st.updated, st.count = true, m.UpdatedTime.Instant(), m.TotalRevisionCount
			}
		}
	}
	for _, st := range slots {
		st.cur = st.orig
	}
	for _, st := range datas {
		st.data, st.info = st.origData, st.origInfo
		if st.origInfo != nil {
			if info, err := events.DecodeRevisionInfo(p.enc, st.origInfo); err == nil {
				st.decoded = info
			}
		}
	}
	for _, w := range pending {
		switch {
		case w.meta != nil:
			p.decideMeta(metas[w.meta.key], w.meta)
		case w.purge != nil:
			p.decidePurge(metas[w.purge.key], slots, datas, w.purge)
		default:
			if r := pgDecideRevision(slots, datas, w.rev); r != nil {
				p.roundRefused = append(p.roundRefused, *r)
			}
		}
	}

	// Write the rows that change: metas, then resource_data, then
	// resource_index (whose uid references resource_data), in key order.
	var ch pgChanges
	var del pgDeletes
	keys := make([]pgMetaKey, 0, len(metas))
	for k := range metas {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].table != keys[j].table {
			return keys[i].table < keys[j].table
		}
		return keys[i].rid < keys[j].rid
	})
	for _, k := range keys {
		st := metas[k]
		if bytes.Equal(st.cur, st.orig) && (st.cur == nil) == (st.orig == nil) {
			continue
		}
		if st.cur == nil {
			del.metas = append(del.metas, pgMetaChange{sql: st.sql, row: []any{k.rid}, prev: st.orig})
			continue
		}
		ch.metas = append(ch.metas, pgMetaChange{sql: st.sql, row: st.row, prev: st.orig})
	}
	for _, uid := range pgSortedKeys(datas) {
		st := datas[uid]
		if st.info == nil {
			if st.purged && st.origInfo != nil {
				del.datas = append(del.datas, pgDataChange{uid: uid, prevData: st.origData, prevInfo: st.origInfo})
			}
			continue // another uid, only read for comparison
		}
		if st.origInfo != nil && bytes.Equal(st.data, st.origData) && bytes.Equal(st.info, st.origInfo) {
			continue
		}
		ch.datas = append(ch.datas, pgDataChange{uid: uid, data: st.data, info: st.info, prevData: st.origData, prevInfo: st.origInfo})
	}
	for _, k := range pgSortedSlotKeys(slots) {
		if st := slots[k]; st.cur == "" && st.orig != "" {
			del.slots = append(del.slots, pgSlotChange{key: k, prev: st.orig})
		} else if st.cur != st.orig {
			ch.slots = append(ch.slots, pgSlotChange{key: k, uid: st.cur, prev: st.orig})
		}
	}
	n := len(ch.metas) + len(ch.datas) + len(ch.slots)
	missed := 0
	switch {
	case n == 0:
	case n >= p.copyFrom:
		missed, err = p.writeCopy(ctx, *tx, &ch, read)
	default:
		missed, err = p.writeBatch(ctx, *tx, &ch)
	}
	if err != nil || del.len() == 0 {
		return missed, err
	}
	m, err := p.writeDeletes(ctx, *tx, &del)
	return missed + m, err
}

// read reads the rows the queue touches into the round's states: meta
// rows, index rows and data rows in one batch (which begins the
// transaction if *tx is nil), then, FOR SHARE, the data rows of the other
// uids that index rows name.
func (p *Sink) read(ctx context.Context, tx *pgx.Tx, pending []pgWrite, metas map[pgMetaKey]*pgMetaState,
	slots map[pgSlotKey]*pgSlotState, datas map[string]*pgDataState, byTable map[string][]string,
	tableSQL map[string]*pgMetaSQL, purgeRids map[string]bool) error {
	scanData := func(rows pgx.Rows) error {
		for rows.Next() {
			var uid string
			var data, info []byte
			if err := rows.Scan(&uid, &data, &info); err != nil {
				return err
			}
			if st := datas[uid]; st != nil {
				st.origData, st.origInfo = data, info
			}
		}
		return rows.Err()
	}
	b := &pgx.Batch{}
	if *tx == nil {
		b.BeginTx(pgx.TxOptions{})
	}
	for _, table := range pgSortedKeys(byTable) {
		b.Queue(tableSQL[table].selectMany, byTable[table]).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var rid string
				var data []byte
				if err := rows.Scan(&rid, &data); err != nil {
					return err
				}
				if st := metas[pgMetaKey{table, rid}]; st != nil {
					st.orig = data
				}
			}
			return rows.Err()
		})
	}
	if len(slots) > 0 {
		var rids, revs, svs []string
		for k := range slots {
			rids, revs, svs = append(rids, k.rid), append(revs, k.revID), append(svs, k.sv)
		}
		b.Queue(p.rev.selectSlots, rids, revs, svs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k pgSlotKey
				var uid string
				if err := rows.Scan(&k.rid, &k.revID, &k.sv, &uid); err != nil {
					return err
				}
				if st := slots[k]; st != nil {
					st.orig = uid
				}
			}
			return rows.Err()
		})
		b.Queue(p.rev.selectData, pgSortedKeys(datas)).Query(scanData)
	}
	if len(purgeRids) > 0 {
		b.Queue(p.pgPurgeSlotsSQL(), pgSortedKeys(purgeRids)).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k pgSlotKey
				var uid string
				if err := rows.Scan(&k.rid, &k.revID, &k.sv, &uid); err != nil {
					return err
				}
				st := slots[k]
				if st == nil {
					st = &pgSlotState{}
					slots[k] = st
				}
				st.orig = uid
			}
			return rows.Err()
		})
	}
	var err error
	if *tx == nil {
		br := p.pool.SendBatch(ctx, b)
		*tx = br.Tx()
		err = br.Close()
	} else {
		err = (*tx).SendBatch(ctx, b).Close()
	}
	if err != nil {
		return fmt.Errorf("sink: postgres read rows: %w", err)
	}

	// Read again, FOR SHARE, the data rows of the other uids that index
	// rows name.
	others := map[string]bool{}
	for k, st := range slots {
		// the data rows a purge may remove, and orders revisions by
		if purgeRids[k.rid] && st.orig != "" && (datas[st.orig] == nil || datas[st.orig].origInfo == nil) {
			others[st.orig] = true
			if datas[st.orig] == nil {
				datas[st.orig] = &pgDataState{}
			}
		}
	}
	for _, w := range pending {
		if w.rev != nil {
			if cur := slots[w.rev.slot].orig; cur != "" && cur != w.rev.info.UID {
				others[cur] = true
				if datas[cur] == nil {
					datas[cur] = &pgDataState{}
				}
			}
		}
	}
	if len(others) > 0 {
		err := pgQuery(ctx, *tx, p.rev.selectDataShared, []any{pgSortedKeys(others)}, func(rows pgx.Rows) error {
			var uid string
			var data, info []byte
			if err := rows.Scan(&uid, &data, &info); err != nil {
				return err
			}
			if st := datas[uid]; st != nil {
				st.origData, st.origInfo = data, info
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("sink: postgres read %s: %w", p.dataTable, err)
		}
	}

	return nil
}

// pgNoneRead reports whether a round's read found none of its rows.
func pgNoneRead(metas map[pgMetaKey]*pgMetaState, slots map[pgSlotKey]*pgSlotState, datas map[string]*pgDataState) bool {
	for _, st := range metas {
		if st.orig != nil {
			return false
		}
	}
	for _, st := range slots {
		if st.orig != "" {
			return false
		}
	}
	for _, st := range datas {
		if st.origInfo != nil {
			return false
		}
	}
	return true
}

// pgChanges are the rows a round writes, each with the content it must
// still have for the write to happen (nil or "": no row).
type pgChanges struct {
	metas []pgMetaChange
	datas []pgDataChange
	slots []pgSlotChange
}

type pgMetaChange struct {
	sql  *pgMetaSQL
	row  []any // the 14 columns
	prev []byte
}

type pgDataChange struct {
	uid                            string
	data, info, prevData, prevInfo []byte
}

type pgSlotChange struct {
	key       pgSlotKey
	uid, prev string
}

// writeBatch writes the changes as one pipelined batch of upserts, each a
// compare-and-swap, and returns how many wrote nothing.
func (p *Sink) writeBatch(ctx context.Context, tx pgx.Tx, ch *pgChanges) (int, error) {
	missed := 0
	check := func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() != 1 {
			missed++
		}
		return nil
	}
	b := &pgx.Batch{}
	for _, c := range ch.metas {
		b.Queue(c.sql.upsert, append(c.row[:14:14], pgPrev(c.prev))...).Exec(check)
	}
	for _, c := range ch.datas {
		b.Queue(p.rev.upsertData, c.uid, c.data, c.info, pgPrev(c.prevData), pgPrev(c.prevInfo)).Exec(check)
	}
	for _, c := range ch.slots {
		var prev any
		if c.prev != "" {
			prev = c.prev
		}
		b.Queue(p.rev.upsertSlot, c.key.rid, c.key.revID, c.key.sv, c.uid, prev).Exec(check)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("sink: postgres write rows: %w", err)
	}
	return missed, nil
}

// pgPrev is a previous bytes value as a parameter: NULL for no row.
func pgPrev(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// decideMeta applies one queued meta to the round's state of its row.
func (p *Sink) decideMeta(st *pgMetaState, w *pgMetaWrite) {
	set := func() {
		st.cur, st.row = w.data, w.row
		st.ordered, st.updated, st.count = true, w.updated, w.count
	}
	switch {
	case st.cur == nil:
		set()
	case bytes.Equal(st.cur, w.data):
	case p.opts.OnDuplicate == store.DupOverwrite:
		set()
	case p.opts.OnDuplicate == store.DupSkip || p.opts.OnDuplicate == store.DupRaise:
		// Another meta appeared between Apply's check and now (a
		// concurrent writer): the first one stays, as the check would
		// have decided. For "skip", the resource's revisions from now on
		// are skipped too.
		if p.opts.OnDuplicate == store.DupSkip {
			p.mu.Lock()
			m := p.skipped[w.model]
			if m == nil {
				m = map[string]struct{}{}
				p.skipped[w.model] = m
			}
			m[w.key.rid] = struct{}{}
			p.mu.Unlock()
		}
	case !st.ordered:
		set() // a stored meta that does not decode is a broken row: replaced
	default:
		c := w.updated.Compare(st.updated)
		if c == 0 {
			c = pgCmpInt64(w.count, st.count)
		}
		if c == 0 {
			c = bytes.Compare(w.data, st.cur)
		}
		if c > 0 {
			set()
		}
	}
}

func pgCmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pgDecideRevision applies one queued revision to the round's state, as
// Disk.ApplyRevision does on disk.
// It returns the refusal of a revision whose uid another resource holds.
func pgDecideRevision(slots map[pgSlotKey]*pgSlotState, datas map[string]*pgDataState, w *pgRevWrite) *store.Refusal {
	uid := w.info.UID
	slot := slots[w.slot]
	if slot.cur != "" && slot.cur != uid {
		if other := datas[slot.cur]; other != nil && other.decoded != nil &&
			!store.Supersedes(&w.info, w.infoBytes, other.decoded, other.info) {
			return nil // the slot names a newer revision
		}
	}
	st := datas[uid]
	if err := store.CheckUIDHolder(&w.info, st.decoded); err != nil {
		// The uid is another resource's: the first holder keeps it and
		// its slot, this revision is not written, and it is handed back
		// (Sink.TakeRefusals) to be dead-lettered with both ids.
		return &store.Refusal{ResourceID: w.info.ResourceID, RevisionID: w.info.RevisionID, UID: uid, Err: err}
	}
	switch {
	case st.info == nil:
		st.data, st.info, st.decoded = w.data, w.infoBytes, &w.info
	case bytes.Equal(st.info, w.infoBytes):
		st.data = w.data // a no-op unless the stored payload was damaged
	case st.decoded == nil || store.Supersedes(&w.info, w.infoBytes, st.decoded, st.info):
		st.data, st.info, st.decoded = w.data, w.infoBytes, &w.info
	}
	slot.cur = uid
	return nil
}

// pgQuery runs a query and calls fn for each row.
func pgQuery(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args []any, fn func(pgx.Rows) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func pgSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func pgSortedSlotKeys(m map[pgSlotKey]*pgSlotState) []pgSlotKey {
	keys := make([]pgSlotKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b pgSlotKey) int {
		if c := strings.Compare(a.rid, b.rid); c != 0 {
			return c
		}
		if c := strings.Compare(a.revID, b.revID); c != 0 {
			return c
		}
		return strings.Compare(a.sv, b.sv)
	})
	return keys
}

// Close writes what is still queued (giving up after 30 s; what is not
// written was not acknowledged either, so it is redelivered) and closes
// the connection pool. The Postgres cannot be used afterwards.
func (p *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.Flush(ctx)
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.pool.Close()
	p.releaseWriterLock()
	return err
}

// pgCopyFrom is the number of changed rows from which a round writes
// through COPY into temporary staging tables and set-based statements
// rather than one upsert per row: COPY costs a few more round trips but
// far less per row (see BenchmarkPostgresFlush).
const pgCopyFrom = 1000

// writeCopy writes the changes by COPY into this session's staging tables
// (pg_temp, emptied at commit), then per table one UPDATE ... FROM joined
// on the key and the previous content (the compare-and-swap) and one
// INSERT ... SELECT ... ON CONFLICT DO NOTHING for new rows. It returns how
// many rows were written by neither.
func (p *Sink) writeCopy(ctx context.Context, tx pgx.Tx, ch *pgChanges, read bool) (int, error) {
	if fresh, rest := ch.split(); fresh.len() > 0 {
		ok, err := p.copyFresh(ctx, tx, &fresh, read)
		if err != nil {
			return 0, err
		}
		if ok {
			if rest.len() == 0 {
				return 0, nil
			}
			ch = &rest
		}
	}
	if _, err := tx.Exec(ctx, pgStageDDL); err != nil {
		return 0, fmt.Errorf("sink: postgres staging tables: %w", err)
	}
	copyRows := func(table string, cols []string, rows [][]any) error {
		if len(rows) == 0 {
			return nil
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", table}, cols, pgx.CopyFromRows(rows))
		if err != nil {
			return fmt.Errorf("sink: postgres copy into %s: %w", table, err)
		}
		return nil
	}
	var tables []*pgMetaSQL
	metaRows := make([][]any, 0, len(ch.metas))
	for _, c := range ch.metas {
		if len(tables) == 0 || tables[len(tables)-1] != c.sql {
			tables = append(tables, c.sql)
		}
		metaRows = append(metaRows, append(append([]any{c.sql.table}, c.row...), pgPrev(c.prev)))
	}
	metaCols := []string{"tbl"}
	for _, c := range pgMetaTableSpec("").columns {
		metaCols = append(metaCols, c.name)
	}
	if err := copyRows("specstar_stage_meta", append(metaCols, "prev"), metaRows); err != nil {
		return 0, err
	}
	dataRows := make([][]any, 0, len(ch.datas))
	for _, c := range ch.datas {
		dataRows = append(dataRows, []any{c.uid, c.data, c.info, pgPrev(c.prevData), pgPrev(c.prevInfo)})
	}
	if err := copyRows("specstar_stage_data", []string{"uid", "data", "info", "prev_data", "prev_info"}, dataRows); err != nil {
		return 0, err
	}
	slotRows := make([][]any, 0, len(ch.slots))
	for _, c := range ch.slots {
		var prev any
		if c.prev != "" {
			prev = c.prev
		}
		slotRows = append(slotRows, []any{c.key.rid, c.key.revID, c.key.sv, c.uid, prev})
	}
	if err := copyRows("specstar_stage_slot", []string{"resource_id", "revision_id", "schema_version", "uid", "prev"}, slotRows); err != nil {
		return 0, err
	}
	written := int64(0)
	count := func(ct pgconn.CommandTag) error {
		written += ct.RowsAffected()
		return nil
	}
	b := &pgx.Batch{}
	for _, s := range tables {
		b.Queue(s.stagedUpdate, s.table).Exec(count)
		b.Queue(s.stagedInsert, s.table).Exec(count)
	}
	if len(ch.datas) > 0 {
		b.Queue(p.rev.stagedDataUpdate).Exec(count)
		b.Queue(p.rev.stagedDataInsert).Exec(count)
	}
	if len(ch.slots) > 0 {
		b.Queue(p.rev.stagedSlotUpdate).Exec(count)
		b.Queue(p.rev.stagedSlotInsert).Exec(count)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("sink: postgres write staged rows: %w", err)
	}
	return len(ch.metas) + len(ch.datas) + len(ch.slots) - int(written), nil
}

func (c *pgChanges) len() int { return len(c.metas) + len(c.datas) + len(c.slots) }

// split parts the changes into the rows that are new (no row was read:
// fresh) and the others, each part in the order of c.
func (c *pgChanges) split() (fresh, rest pgChanges) {
	for _, m := range c.metas {
		if m.prev == nil {
			fresh.metas = append(fresh.metas, m)
		} else {
			rest.metas = append(rest.metas, m)
		}
	}
	for _, d := range c.datas {
		if d.prevInfo == nil {
			fresh.datas = append(fresh.datas, d)
		} else {
			rest.datas = append(rest.datas, d)
		}
	}
	for _, s := range c.slots {
		if s.prev == "" {
			fresh.slots = append(fresh.slots, s)
		} else {
			rest.slots = append(rest.slots, s)
		}
	}
	return fresh, rest
}

// pgUniqueViolation is Postgres's SQLSTATE for a duplicate key.
const pgUniqueViolation = "23505"

// errGuessedWrong is copyGuessed's report that a row it took for new
// exists: the transaction is aborted, and the Flush is done again,
// reading first.
var errGuessedWrong = errors.New("sink: postgres: a row taken for new exists")

// copyFresh writes rows that did not exist when read by COPY straight into
// their tables (metas, then resource_data, then resource_index, whose uid
// references it), as a plain bulk load does: the compare-and-swap of a new
// row is "insert only if there is still no row", which a COPY into a
// table with that primary key is. If another writer created one of the
// rows in between, the COPY fails on the key; everything it wrote is
// rolled back to a savepoint and copyFresh reports false, so that the
// caller writes the rows through the staging tables, whose INSERT ... ON
// CONFLICT DO NOTHING counts the row as missed and the next round decides
// it again. Without read (a round that read nothing: every row is taken
// for new), it is copyGuessed.
func (p *Sink) copyFresh(ctx context.Context, tx pgx.Tx, ch *pgChanges, read bool) (bool, error) {
	if !read {
		return true, p.copyGuessed(ctx, tx, ch)
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT specstar_copy"); err != nil {
		return false, fmt.Errorf("sink: postgres savepoint: %w", err)
	}
	table, failed := p.copyInto(ctx, tx, ch)
	var pgErr *pgconn.PgError
	switch {
	case failed == nil:
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT specstar_copy"); err != nil {
			return false, fmt.Errorf("sink: postgres release savepoint: %w", err)
		}
		return true, nil
	case errors.As(failed, &pgErr) && pgErr.Code == pgUniqueViolation:
		// another writer created one of the rows since the read
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT specstar_copy"); err != nil {
			return false, fmt.Errorf("sink: postgres rollback to savepoint: %w", err)
		}
		return false, nil
	}
	return false, fmt.Errorf("sink: postgres copy into %s: %w", table, failed)
}

// copyGuessed is copyFresh for a round that read nothing, the first of
// its transaction: with no savepoint (a subtransaction and two round
// trips less per batch), a row that exists after all fails the COPY and
// aborts the transaction, which is reported as errGuessedWrong; nothing
// was written, and the Flush starts again, reading first.
func (p *Sink) copyGuessed(ctx context.Context, tx pgx.Tx, ch *pgChanges) error {
	table, err := p.copyInto(ctx, tx, ch)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation:
		return errGuessedWrong
	}
	return fmt.Errorf("sink: postgres copy into %s: %w", table, err)
}

// copyInto COPYs the changes' rows into their tables: metas, then
// resource_data, then resource_index (whose uid references it). It
// returns the table a COPY failed on, with the error.
func (p *Sink) copyInto(ctx context.Context, tx pgx.Tx, ch *pgChanges) (string, error) {
	copyRows := func(table string, cols []string, rows [][]any) error {
		n, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows))
		if err == nil && n != int64(len(rows)) {
			err = fmt.Errorf("copied %d rows of %d", n, len(rows))
		}
		return err
	}
	var metaCols []string
	for _, c := range pgMetaTableSpec("").columns {
		metaCols = append(metaCols, c.name)
	}
	for i := 0; i < len(ch.metas); {
		s := ch.metas[i].sql
		var rows [][]any
		for ; i < len(ch.metas) && ch.metas[i].sql == s; i++ {
			rows = append(rows, ch.metas[i].row)
		}
		if err := copyRows(s.table, metaCols, rows); err != nil {
			return s.table, err
		}
	}
	if len(ch.datas) > 0 {
		rows := make([][]any, len(ch.datas))
		for i, c := range ch.datas {
			rows[i] = []any{c.uid, c.data, c.info}
		}
		if err := copyRows(p.dataTable, []string{"uid", "data", "info"}, rows); err != nil {
			return p.dataTable, err
		}
	}
	if len(ch.slots) > 0 {
		rows := make([][]any, len(ch.slots))
		for i, c := range ch.slots {
			rows[i] = []any{c.key.rid, c.key.revID, c.key.sv, c.uid}
		}
		if err := copyRows(p.indexTable, []string{"resource_id", "revision_id", "schema_version", "uid"}, rows); err != nil {
			return p.indexTable, err
		}
	}
	return "", nil
}
