// Package postgres reads a live SpecStar deployment whose metas are in
// Postgres: what SpecStar's PostgresMetaStore and PostgresResourceStore
// write (the tables pgsink.Sink writes):
//
//	{prefix}{model}_meta      one row per resource, data = ResourceMeta in the deployment's encoding
//	{prefix}resource_data     uid -> payload bytes and RevisionInfo (info)
//	{prefix}resource_index    (resource_id, revision_id, schema_version or '__none__') -> uid
//
// and turns them into the DumpRecords of an archive: per resource its
// MetaRecord (ResourceMeta re-encoded to msgpack) followed by one
// RevisionRecord (RawResource{info, raw_data}, msgpack) per revision
// (or revisions listed from an S3 resource store). It offers a
// resumable consistent Snapshot, a live tail by logical replication
// (SetupLogical, StreamLogical) or by polling (Poll), its postgres:// URL
// options (ParseURL), and, on top, DeploymentSource (the source.Source
// verify and reconcile read), OpenDeployment and Export.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	s3sink "github.com/specstar/replicator/sink/s3"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/specstar/replicator/events"
)

// Options choose the tables and encoding of the SpecStar Postgres
// deployment a Source reads (the same meaning as
// pgsink.Options, so one configuration describes both ends).
type Options struct {
	// Encoding of the meta data and info columns; UNSET (the zero value)
	// means msgpack, what SpecStar's Postgres factories write.
	Encoding events.Opt[events.Encoding]
	// MetaTable names a model's meta table, "{model}" replaced by the
	// model name; "" means "{model}_meta".
	MetaTable string
	// TablePrefix is SpecStar's table_prefix, before the meta tables and
	// resource_data / resource_index. Letters, digits and "_".
	TablePrefix string
	// Models to read. Empty means every table of the current schema whose
	// name is TablePrefix + MetaTable with "{model}" matching a non-empty
	// model name (letters, digits, "_", "-") and that has the meta
	// columns resource_id, data and updated_time; the template must then
	// contain "{model}". Discovery is by name only: without a prefix,
	// "{model}_meta" also matches the meta tables of other prefixes.
	Models []string
	// Revisions reads revisions from {prefix}resource_data and
	// {prefix}resource_index. False: the deployment keeps them elsewhere
	// (S3, disk): they are read from RevisionsFrom, or, without it, only
	// MetaRecords are emitted.
	Revisions bool
	// RevisionsFrom, with Revisions false, is the deployment's resource
	// store (its S3 store, say): after each MetaRecord the resource's
	// revisions listed there are emitted as RevisionRecords.
	RevisionsFrom RevisionLister
	// RevisionsWait bounds how long a resource whose current revision is
	// not (yet) listed by RevisionsFrom is listed again before the read
	// fails (0 = DefaultRevisionsWait). SpecStar writes the resource store
	// before the meta, so only a lagging listing makes it wait.
	RevisionsWait time.Duration
	// Resources names the resource store RevisionsFrom reads (the
	// resources= URL option, e.g. an s3:// URL); the source does not open
	// it (the caller does) and refuses it without RevisionsFrom.
	Resources string
	// Blobs is the deployment's blob store (a DiskBlobStore directory or
	// an s3:// URL); the source itself does not read it (the publisher
	// does).
	Blobs string
}

// RevisionLister lists one resource's revisions in a resource store kept
// outside Postgres (s3sink.Sink is one); it exists so the Postgres source can
// read a Postgres+S3 deployment without opening S3 itself.
type RevisionLister interface {
	ResourceRevisions(ctx context.Context, model, rid string) iter.Seq2[*events.RawResource, error]
}

// RevisionIndex is a RevisionLister that can leave out the revisions
// already published, told apart by their index object's key and ETag
// (s3sink.Sink is one): a live source lists a resource on every change of it,
// and would otherwise re-read its whole history each time.
type RevisionIndex interface {
	ListRevisions(ctx context.Context, model, rid string, skip func(s3sink.ListedRevision) bool) iter.Seq2[s3sink.ListedRevision, error]
}

// maxKnownIndex bounds the index objects a Source remembers as
// published; past it the memory is cleared and revisions are read (and
// published, harmlessly) again.
const maxKnownIndex = 200_000

// knownIndex remembers the index objects (key -> ETag) whose revisions
// were published, for RevisionIndex.
type knownIndex struct {
	mu   sync.Mutex
	etag map[string]string
}

func (k *knownIndex) has(key, etag string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.etag[key]
	return ok && e == etag && etag != ""
}

func (k *knownIndex) add(key, etag string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.etag == nil || len(k.etag) >= maxKnownIndex {
		k.etag = map[string]string{}
	}
	k.etag[key] = etag
}

func (k *knownIndex) forget() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.etag = nil
}

// DefaultRevisionsWait is Options.RevisionsWait when none is given:
// long enough for the listings of eventually consistent S3 servers.
const DefaultRevisionsWait = 10 * time.Second

// Source reads a SpecStar Postgres deployment; it exists to
// replicate a live deployment (Snapshot, then Poll) rather than an archive.
// It is safe for concurrent use.
type Source struct {
	known      knownIndex // revisions of RevisionsFrom already emitted
	pool       *pgxpool.Pool
	opts       Options
	enc        events.Encoding
	tmpl       string
	dataTable  string
	indexTable string
}

// ForgetEmitted makes the source read every revision of a resource from
// RevisionsFrom again, not only those not emitted before. A tail calls it
// when it starts over from its stored position, since revisions emitted
// after that position may never have reached the stream.
func (s *Source) ForgetEmitted() { s.known.forget() }

// Position is where a Snapshot stands, JSON-serializable so that the
// caller can store it durably and resume a Snapshot after a crash.
type Position struct {
	// Model is the model being read; models are read in byte order of
	// their names, so every model before it is complete. "" is the start.
	Model string `json:"model,omitempty"`
	// ResourceID is the last resource of Model emitted in full ("" = none).
	ResourceID string `json:"resource_id,omitempty"`
	// Cursor is the Poll cursor taken in the first Snapshot run, kept
	// through resumptions: polling must start from the earliest snapshot
	// so that what changed between runs is not missed.
	Cursor *Cursor `json:"cursor,omitempty"`
}

// SnapshotStats report what a Snapshot read, and where a live tail takes
// over.
type SnapshotStats struct {
	// SnapshotID is pg_export_snapshot() of the snapshot read. Postgres
	// lets another session import it (SET TRANSACTION SNAPSHOT) only while
	// the Snapshot's transaction is open, i.e. from inside emit; after
	// Snapshot returns it identifies the snapshot in logs.
	SnapshotID string
	// TxSnapshot is pg_current_snapshot() (xmin:xmax:xip,...) of the
	// snapshot: durable, so a logical-replication tail whose slot was
	// created before the Snapshot can skip exactly the transactions the
	// snapshot saw (pg_visible_in_snapshot) and miss none.
	TxSnapshot string
	Models     []string // the models read, in order
	Metas      int      // MetaRecords emitted
	Revisions  int      // RevisionRecords emitted
	End        Position // the Position after the last resource
	Cursor     Cursor   // where Poll starts to follow the changes after the (first) snapshot
}

// pgNoneSchema is PostgresResourceStore's stand-in for a None
// schema_version in resource_index.
const pgNoneSchema = "__none__"

// snapshotPage is how many metas one query of Snapshot or Poll reads; only
// one page (and the revisions of one row at a time) is in memory.
const snapshotPage = 256

// Open connects to dsn (a libpq URL or key=value string) and
// checks the options; it is the one way to get a Source. Tables
// are looked up when read.
func Open(ctx context.Context, dsn string, opts Options) (*Source, error) {
	enc := events.Msgpack
	if opts.Encoding.Present {
		if opts.Encoding.Null {
			return nil, errors.New("source: postgres encoding is None (leave it UNSET for msgpack)")
		}
		enc = opts.Encoding.Value
	}
	if enc != events.JSON && enc != events.Msgpack {
		return nil, fmt.Errorf("source: unknown encoding %v", enc)
	}
	tmpl := opts.MetaTable
	if tmpl == "" {
		tmpl = "{model}_meta"
	}
	if err := checkConfigName("table prefix", opts.TablePrefix); err != nil {
		return nil, err
	}
	if err := checkConfigName("meta table template", strings.ReplaceAll(tmpl, "{model}", "")); err != nil {
		return nil, err
	}
	if opts.Revisions && opts.RevisionsFrom != nil {
		return nil, errors.New("source: revisions come either from the Postgres resource tables (revisions=true) or from RevisionsFrom, not both")
	}
	if opts.Resources != "" && opts.RevisionsFrom == nil {
		return nil, fmt.Errorf("source: resource store %q given but not opened (RevisionsFrom is nil)", opts.Resources)
	}
	if opts.RevisionsWait <= 0 {
		opts.RevisionsWait = DefaultRevisionsWait
	}
	if len(opts.Models) == 0 && !strings.Contains(tmpl, "{model}") {
		return nil, fmt.Errorf("source: meta table template %q has no {model}: models cannot be discovered, list them", tmpl)
	}
	s := &Source{
		opts:       opts,
		enc:        enc,
		tmpl:       tmpl,
		dataTable:  opts.TablePrefix + "resource_data",
		indexTable: opts.TablePrefix + "resource_index",
	}
	for _, m := range opts.Models {
		if _, err := s.metaTable(m); err != nil {
			return nil, err
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("source: postgres dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("source: postgres connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("source: postgres connect to %s@%s:%d/%s: %w",
			cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	s.pool = pool
	return s, nil
}

// Close closes the connection pool; the source cannot be used afterwards.
func (s *Source) Close() { s.pool.Close() }

func checkConfigName(what, s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("source: %s %q: character %q is not an ASCII letter, digit or '_'", what, s, c)
		}
	}
	return nil
}

// metaTable returns a model's meta table name, validating the model name
// as pgsink.Sink does (letters, digits, "_", "-").
func (s *Source) metaTable(model string) (string, error) {
	if !validModel(model) {
		return "", fmt.Errorf("source: model %q cannot be part of a meta table name (letters, digits, '_' and '-' can)", model)
	}
	name := s.opts.TablePrefix + strings.ReplaceAll(s.tmpl, "{model}", model)
	if len(name) > 63 {
		return "", fmt.Errorf("source: meta table %q of model %q is longer than a Postgres identifier may be (63 bytes)", name, model)
	}
	return name, nil
}

func validModel(model string) bool {
	if model == "" || !utf8.ValidString(model) {
		return false
	}
	for _, r := range model {
		if !(r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// models returns the models to read, sorted and without duplicates:
// opts.Models, or those discovered in the current schema (see
// Options.Models).
func (s *Source) models(ctx context.Context, q pgxQuerier) ([]string, error) {
	if len(s.opts.Models) > 0 {
		return slices.Compact(slices.Sorted(slices.Values(s.opts.Models))), nil
	}
	before, after, _ := strings.Cut(s.tmpl, "{model}")
	re := regexp.MustCompile("^" + regexp.QuoteMeta(s.opts.TablePrefix+before) + "(.+)" + regexp.QuoteMeta(after) + "$")
	rows, err := q.Query(ctx, `SELECT c.relname::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
		  AND (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		       AND a.attname IN ('resource_id', 'data', 'updated_time')) = 3`)
	if err != nil {
		return nil, fmt.Errorf("source: postgres: discover meta tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("source: postgres: discover meta tables: %w", err)
	}
	var models []string
	for _, n := range names {
		if m := re.FindStringSubmatch(n); m != nil && validModel(m[1]) {
			models = append(models, m[1])
		}
	}
	slices.Sort(models)
	return slices.Compact(models), nil
}

// pgxQuerier is a connection or transaction.
type pgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// metaRow is one meta row read.
type metaRow struct {
	rid     string
	data    []byte
	updated time.Time
	hash    string // md5(data), Poll's fingerprint
}

// Snapshot emits, from ONE consistent snapshot (a REPEATABLE READ READ
// ONLY transaction), every model's resources in resource_id order (the
// database's collation): each resource's MetaRecord (data re-encoded to
// msgpack, as in an archive), then, with Revisions, one RevisionRecord per
// revision (ordered by revision number, then schema version; the
// resource tables are shared by the models of a prefix, so a resource's
// revisions are the resource_index rows of its resource_id). Metas are
// read a page at a time and revisions streamed, so memory does not grow
// with the tables.
//
// pos, given with each record, is the Position to resume from once that
// record and all before it are durably handled: it names the resource
// only with the resource's last record. Snapshot(from) continues after
// from: a resource some of whose records were handled before a stop is
// emitted again in full (the sinks are idempotent), no other is. The
// resumed run reads a newer snapshot than the first; from.Cursor (taken by
// the first run) keeps Poll starting early enough to cover the gap.
// Errors from emit are returned as they are (wrapped).
func (s *Source) Snapshot(ctx context.Context, from Position, emit func(model string, rec events.Record, pos Position) error) (SnapshotStats, error) {
	return s.snapshot(ctx, "", from, emit)
}

// snapshot runs a snapshot in a REPEATABLE READ READ ONLY transaction:
// a fresh one whose snapshot it exports (importName == ""), or the
// exported snapshot importName (SnapshotAt).
func (s *Source) snapshot(ctx context.Context, importName string, from Position, emit func(model string, rec events.Record, pos Position) error) (SnapshotStats, error) {
	var st SnapshotStats
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return st, fmt.Errorf("source: postgres snapshot: %w", err)
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return st, fmt.Errorf("source: postgres snapshot: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if importName == "" {
		if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot(), pg_current_snapshot()::text`).Scan(&st.SnapshotID, &st.TxSnapshot); err != nil {
			return st, fmt.Errorf("source: postgres snapshot: export: %w", err)
		}
	} else {
		// SET TRANSACTION SNAPSHOT takes no parameters; the name is quoted as a literal.
		if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+strings.ReplaceAll(importName, "'", "''")+`'`); err != nil {
			return st, fmt.Errorf("source: postgres snapshot: import snapshot %q: %w", importName, err)
		}
		st.SnapshotID = importName
		if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&st.TxSnapshot); err != nil {
			return st, fmt.Errorf("source: postgres snapshot: %w", err)
		}
	}
	models, err := s.models(ctx, tx)
	if err != nil {
		return st, err
	}
	st.Models = models
	pos := from
	if pos.Cursor == nil {
		c, err := s.snapshotCursor(ctx, tx, models)
		if err != nil {
			return st, err
		}
		pos.Cursor = &c
	}
	st.Cursor = *pos.Cursor
	for _, model := range models {
		if model < from.Model {
			continue
		}
		after := ""
		if model == from.Model {
			after = from.ResourceID
		} else {
			pos.Model, pos.ResourceID = model, ""
		}
		if err := s.snapshotModel(ctx, tx, model, after, &pos, &st, emit); err != nil {
			return st, err
		}
	}
	st.End = pos
	if err := tx.Commit(ctx); err != nil {
		return st, fmt.Errorf("source: postgres snapshot: commit: %w", err)
	}
	return st, nil
}

// snapshotModel emits one model's resources after the resource id after
// ("" = from the first), advancing pos.
func (s *Source) snapshotModel(ctx context.Context, tx pgx.Tx, model, after string, pos *Position, st *SnapshotStats,
	emit func(string, events.Record, Position) error) error {
	table, err := s.metaTable(model)
	if err != nil {
		return err
	}
	// Two statements rather than one with "$2 OR resource_id > $1", which
	// the planner could not turn into an index range scan.
	sel := `SELECT resource_id, data, updated_time, '' FROM ` + ident(table)
	order := ` ORDER BY resource_id LIMIT ` + fmt.Sprint(snapshotPage)
	first := after == ""
	for {
		var rows pgx.Rows
		if first {
			rows, err = tx.Query(ctx, sel+order)
		} else {
			rows, err = tx.Query(ctx, sel+` WHERE resource_id > $1`+order, after)
		}
		if err != nil {
			return fmt.Errorf("source: postgres %s: read metas after %q: %w", table, after, err)
		}
		page, err := collectMetas(rows)
		if err != nil {
			return fmt.Errorf("source: postgres %s: read metas after %q: %w", table, after, err)
		}
		err = s.emitResources(ctx, tx, model, table, page, false, func(rec events.Record, m *metaRow, last bool) error {
			if _, ok := rec.(*events.MetaRecord); ok {
				st.Metas++
			} else {
				st.Revisions++
			}
			if last {
				pos.Model, pos.ResourceID = model, m.rid
			}
			return emit(model, rec, *pos)
		})
		if err != nil {
			return err
		}
		if len(page) < snapshotPage {
			return nil
		}
		after, first = page[len(page)-1].rid, false
	}
}

func collectMetas(rows pgx.Rows) ([]metaRow, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (metaRow, error) {
		var m metaRow
		err := r.Scan(&m.rid, &m.data, &m.updated, &m.hash)
		return m, err
	})
}

// emitResources emits, for each meta of page in order, its MetaRecord and
// (with Revisions) its RevisionRecords, read in one streamed query; last
// marks the final record of a resource. live (Poll, StreamLogical) lets a
// RevisionIndex leave out the revisions already emitted.
func (s *Source) emitResources(ctx context.Context, tx pgx.Tx, model, table string, page []metaRow, live bool,
	emit func(rec events.Record, m *metaRow, last bool) error) error {
	if len(page) == 0 {
		return nil
	}
	metaRecs := make([]*events.MetaRecord, len(page))
	metas := make([]*events.ResourceMeta, len(page))
	for i := range page {
		meta, err := events.DecodeResourceMeta(s.enc, page[i].data)
		if err != nil {
			return fmt.Errorf("source: postgres %s row %q: data: %w", table, page[i].rid, err)
		}
		b, err := meta.Encode(events.Msgpack)
		if err != nil {
			return fmt.Errorf("source: postgres %s row %q: re-encode meta: %w", table, page[i].rid, err)
		}
		metaRecs[i], metas[i] = &events.MetaRecord{Data: b}, meta
	}
	if !s.opts.Revisions {
		for i := range page {
			var err error
			if s.opts.RevisionsFrom != nil {
				err = s.emitListed(ctx, model, table, &page[i], metas[i], metaRecs[i], live, emit)
			} else {
				err = emit(metaRecs[i], &page[i], true)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	rids := make([]string, len(page))
	for i := range page {
		rids[i] = page[i].rid
	}
	rows, err := tx.Query(ctx, `SELECT k.ord, ri.resource_id, ri.revision_id, ri.schema_version, ri.uid, rd.info, rd.data
		FROM unnest($1::text[]) WITH ORDINALITY AS k(rid, ord)
		JOIN `+ident(s.indexTable)+` AS ri ON ri.resource_id = k.rid
		LEFT JOIN `+ident(s.dataTable)+` AS rd ON rd.uid = ri.uid
		ORDER BY k.ord, length(ri.revision_id), ri.revision_id, ri.schema_version`, rids)
	if err != nil {
		return fmt.Errorf("source: postgres %s / %s: read revisions of model %q: %w", s.indexTable, s.dataTable, model, err)
	}
	defer rows.Close()
	// A revision record is held back one step so that the last record
	// of each resource can be marked.
	type pending struct {
		rec events.Record
		i   int
	}
	var held *pending
	flush := func(last bool) error {
		if held == nil {
			return nil
		}
		h := held
		held = nil
		return emit(h.rec, &page[h.i], last)
	}
	next := 0 // the next meta to emit
	for rows.Next() {
		var (
			ord                 int64
			rid, revID, sv, uid string
			infoBytes, data     []byte
		)
		if err := rows.Scan(&ord, &rid, &revID, &sv, &uid, &infoBytes, &data); err != nil {
			return fmt.Errorf("source: postgres %s: revisions of model %q: %w", s.indexTable, model, err)
		}
		i := int(ord) - 1
		for next <= i {
			if err := flush(true); err != nil {
				return err
			}
			held = &pending{metaRecs[next], next}
			next++
		}
		where := fmt.Sprintf("source: postgres %s row (%q, %q, %q) uid %q", s.indexTable, rid, revID, sv, uid)
		if infoBytes == nil {
			return fmt.Errorf("%s: no %s row", where, s.dataTable)
		}
		info, err := events.DecodeRevisionInfo(s.enc, infoBytes)
		if err != nil {
			return fmt.Errorf("%s: info: %w", where, err)
		}
		raw := &events.RawResource{Info: *info, RawData: data}
		b, err := raw.Encode(events.Msgpack)
		if err != nil {
			return fmt.Errorf("%s: encode: %w", where, err)
		}
		if err := flush(false); err != nil {
			return err
		}
		held = &pending{&events.RevisionRecord{Data: b}, i}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("source: postgres %s: revisions of model %q: %w", s.indexTable, model, err)
	}
	for next < len(page) {
		if err := flush(true); err != nil {
			return err
		}
		held = &pending{metaRecs[next], next}
		next++
	}
	return flush(true)
}

// emitListed emits a meta and then its resource's revisions as
// RevisionsFrom lists them (each RawResource re-encoded to msgpack, as the
// Postgres path does). The meta's current revision must be among them:
// SpecStar writes the resource store before the meta, so it is missing
// only while a listing lags; the resource is listed again, with backoff,
// for up to RevisionsWait (revisions already emitted are not emitted
// again), then the read fails naming the resource and the missing key.
// When live, revisions already emitted by this source (same index key and
// ETag) are not read again.
func (s *Source) emitListed(ctx context.Context, model, table string, m *metaRow, meta *events.ResourceMeta,
	metaRec *events.MetaRecord, live bool, emit func(rec events.Record, m *metaRow, last bool) error) error {
	var held events.Record = metaRec // held back one step, so the last record can be marked
	done := map[string]bool{}        // (revision_id, schema_version) already emitted
	found := false
	listed := 0
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond), backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0))
	deadline := time.Now().Add(s.opts.RevisionsWait)
	for {
		var lastMissing error
		var knownCurrent atomic.Bool // the current revision, left out as already emitted
		for lr, err := range s.listRevisions(ctx, model, m.rid, meta, live, &knownCurrent) {
			if errors.Is(err, fs.ErrNotExist) {
				// An index entry whose stored revision is gone (a purge
				// half-way): skipped, as the store's own walks skip it.
				// Should it be the current one, the wait below reports it.
				lastMissing = err
				continue
			}
			if err != nil {
				return fmt.Errorf("source: postgres %s row %q: revisions from the resource store: %w", table, m.rid, err)
			}
			listed++
			raw := lr.Revision
			info := &raw.Info
			if info.RevisionID == meta.CurrentRevisionID && sameVersion(info.SchemaVersion, meta.SchemaVersion) {
				found = true
			}
			key := info.RevisionID + "\x00" + versionDir(info.SchemaVersion)
			if done[key] {
				continue
			}
			done[key] = true
			b, err := raw.Encode(events.Msgpack)
			if err != nil {
				return fmt.Errorf("source: resource store of model %q: revision %q (uid %s): encode: %w", model, info.RevisionID, info.UID, err)
			}
			if err := emit(held, m, false); err != nil {
				return err
			}
			held = &events.RevisionRecord{Data: b}
			if lr.Key != "" {
				s.known.add(lr.Key, lr.ETag)
			}
		}
		if found || knownCurrent.Load() {
			return emit(held, m, true)
		}
		wait := min(bo.NextBackOff(), time.Until(deadline))
		if wait <= 0 {
			err := fmt.Errorf("source: postgres %s row %q: its current revision %q is not in the resource store after %s "+
				"(model %q, key resources/resource/%s/%s/%s/uid under the model's prefix; %d revisions listed)",
				table, m.rid, meta.CurrentRevisionID, s.opts.RevisionsWait, model, m.rid, meta.CurrentRevisionID,
				versionDir(meta.SchemaVersion), listed)
			if lastMissing != nil {
				err = fmt.Errorf("%w; last read error: %w", err, lastMissing)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// listRevisions lists a resource's revisions from RevisionsFrom, leaving
// out, when following changes (live) and where the store can tell, those
// already emitted; a left-out current revision sets *knownCurrent (from
// the store's listing goroutine). A snapshot emits everything.
func (s *Source) listRevisions(ctx context.Context, model, rid string, meta *events.ResourceMeta, live bool, knownCurrent *atomic.Bool) iter.Seq2[s3sink.ListedRevision, error] {
	idx, ok := s.opts.RevisionsFrom.(RevisionIndex)
	if !ok {
		return func(yield func(s3sink.ListedRevision, error) bool) {
			for raw, err := range s.opts.RevisionsFrom.ResourceRevisions(ctx, model, rid) {
				if !yield(s3sink.ListedRevision{Revision: raw}, err) {
					return
				}
			}
		}
	}
	return idx.ListRevisions(ctx, model, rid, func(lr s3sink.ListedRevision) bool {
		if !live || !s.known.has(lr.Key, lr.ETag) {
			return false
		}
		if lr.RevisionID == meta.CurrentRevisionID && sameVersion(lr.SchemaVersion, meta.SchemaVersion) {
			knownCurrent.Store(true)
		}
		return true
	})
}

// sameVersion compares two schema versions, None (or UNSET) equal to None.
func sameVersion(a, b events.Opt[string]) bool {
	return a.IsSet() == b.IsSet() && (!a.IsSet() || a.Value == b.Value)
}

// versionDir is the resource store's p_schema_version: "v_{sv}" or
// "no_ver" for None.
func versionDir(sv events.Opt[string]) string {
	if sv.IsSet() {
		return "v_" + sv.Value
	}
	return "no_ver"
}
