package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// The Postgres tests run against a real server: $PG_DSN, by default the
// machine's cluster. They fail, never skip, when it cannot be reached.
// Each test writes tables of its own prefix (t_<random>_) and drops them.

// record is one decoded record of a fixture archive.
type record = sinktestutil.Record

func pgTestDSN() string { return pgtest.SharedDSN() }

// pgDSNWith adds connection parameters to the test DSN (URL or key=value).
func pgDSNWith(params ...string) string {
	dsn := pgTestDSN()
	if strings.Contains(dsn, "://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + strings.Join(params, "&")
	}
	return dsn + " " + strings.Join(params, " ")
}

func pgRandom() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// pgAdmin is a plain connection for the test's own SQL.
func pgAdmin(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgTestDSN())
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgTestDSN(), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// pgPrefix returns a fresh table prefix whose tables are dropped when the
// test ends.
func pgPrefix(t testing.TB) string {
	t.Helper()
	prefix := "t_" + pgRandom() + "_"
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, pgTestDSN())
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, name := range pgTables(t, conn, prefix) {
			if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
				t.Errorf("cleanup: drop %s: %v", name, err)
			}
		}
	})
	return prefix
}

func pgTables(t testing.TB, conn *pgx.Conn, prefix string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(),
		`SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1) ORDER BY 1`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// pgOpen opens a sink on the test server (small pool, optional extra DSN
// parameters), closed when the test ends.
func pgOpen(t testing.TB, opts Options, params ...string) *Sink {
	t.Helper()
	p, err := Open(context.Background(), pgDSNWith(append([]string{"pool_max_conns=4"}, params...)...), opts)
	if err != nil {
		t.Fatalf("cannot open the Postgres sink at %s (set PG_DSN to a reachable server): %v", pgTestDSN(), err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// pgFlush flushes, retrying transient errors as the replicator does.
func pgFlush(t testing.TB, p *Sink) {
	t.Helper()
	var err error
	for i := 0; i < 50; i++ {
		if err = p.Flush(context.Background()); err == nil {
			return
		}
		if store.IsInvalid(err) {
			t.Fatalf("flush: permanent error: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("flush keeps failing: %v", err)
}

// pgReadArchive reads the Meta, Revision and Blob records of a top-level
// fixture archive.
func pgReadArchive(t testing.TB, name string) []record {
	t.Helper()
	return sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, name))
}

// pgApply applies records from several goroutines at once, as the
// replicator does with a batch, and checks the outcomes.
func pgApply(t testing.TB, p *Sink, recs []record) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(recs))
	next := make(chan record)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range next {
				var (
					out store.Outcome
					err error
				)
				switch {
				case r.Meta != nil:
					out, err = p.ApplyMeta(ctx, r.Model, r.Meta)
				case r.Rev != nil:
					out, err = p.ApplyRevision(ctx, r.Model, r.Rev)
				default:
					b := r.Blob
					out, err = p.ApplyBlob(ctx, b.FileID, b.Size, b.ContentType, bytes.NewReader(b.BlobData))
					if err == nil && out != store.Unchanged {
						err = fmt.Errorf("blob: %v, want unchanged", out)
					}
				}
				if err == nil && out != store.Written && out != store.Unchanged {
					err = fmt.Errorf("outcome %v", out)
				}
				if err != nil {
					errs <- fmt.Errorf("apply %s record: %w", r.Model, err)
				}
			}
		}()
	}
	for _, r := range recs {
		next <- r
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// pgDump returns every row of the prefix's tables as JSON text, and each
// row's xmin (the transaction that wrote its current version).
func pgDump(t testing.TB, conn *pgx.Conn, prefix string) (rows, xmins []string) {
	t.Helper()
	ctx := context.Background()
	for _, table := range pgTables(t, conn, prefix) {
		r, err := conn.Query(ctx, "SELECT xmin::text, to_jsonb(t)::text FROM "+pgx.Identifier{table}.Sanitize()+" t ORDER BY 2")
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var xmin, row string
			if err := r.Scan(&xmin, &row); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, strings.TrimPrefix(table, prefix)+" "+row)
			xmins = append(xmins, xmin)
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return rows, xmins
}

func pgEncoding(opts Options) events.Encoding {
	if opts.Encoding.IsSet() {
		return opts.Encoding.Value
	}
	return events.Msgpack
}

// pgVerify reads every record of an archive back from the sink and checks
// it byte for byte, and the rows' promoted columns against data.
func pgVerify(t testing.TB, p *Sink, conn *pgx.Conn, prefix string, opts Options, recs []record) {
	t.Helper()
	ctx := context.Background()
	enc := pgEncoding(opts)
	metas := map[string]bool{}
	uids := map[string]bool{}
	slots := map[string]bool{}
	for _, r := range recs {
		switch {
		case r.Meta != nil:
			metas[r.Model+"\x00"+r.Meta.ResourceID] = true
			m, err := p.Meta(ctx, r.Model, r.Meta.ResourceID)
			if err != nil {
				t.Fatalf("meta %s: %v", r.Meta.ResourceID, err)
			}
			if got, _ := m.Encode(events.Msgpack); !bytes.Equal(got, r.Raw) {
				t.Errorf("meta %s re-encoded differs from the archive", r.Meta.ResourceID)
			}
			pgCheckMetaRow(t, conn, prefix+r.Model+"_meta", r.Meta, enc)
		case r.Rev != nil:
			info := r.Rev.Info
			uids[info.UID] = true
			slots[fmt.Sprintf("%q %q %q", info.ResourceID, info.RevisionID, store.SchemaDir(info.SchemaVersion))] = true
			gotInfo, data, err := p.Revision(ctx, r.Model, info.ResourceID, info.RevisionID, info.SchemaVersion)
			if err != nil {
				t.Fatalf("revision %s: %v", info.RevisionID, err)
			}
			got, err := (&events.RawResource{Info: *gotInfo, RawData: data}).Encode(events.Msgpack)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, r.Raw) {
				t.Errorf("revision %s %v re-encoded differs from the archive", info.RevisionID, info.SchemaVersion)
			}
			var sv string
			err = conn.QueryRow(ctx, "SELECT schema_version FROM "+pgx.Identifier{prefix + "resource_index"}.Sanitize()+
				" WHERE resource_id = $1 AND revision_id = $2 AND uid = $3", info.ResourceID, info.RevisionID, info.UID).Scan(&sv)
			if err != nil {
				t.Fatalf("index row of %s: %v", info.RevisionID, err)
			}
			want := "__none__"
			if info.SchemaVersion.IsSet() {
				want = info.SchemaVersion.Value
			}
			if sv != want {
				t.Errorf("index row of %s: schema_version %q, want %q", info.RevisionID, sv, want)
			}
			var infoCol []byte
			err = conn.QueryRow(ctx, "SELECT info FROM "+pgx.Identifier{prefix + "resource_data"}.Sanitize()+" WHERE uid = $1", info.UID).Scan(&infoCol)
			if err != nil {
				t.Fatal(err)
			}
			if wantInfo, _ := info.Encode(enc); !bytes.Equal(infoCol, wantInfo) {
				t.Errorf("info column of %s is not the %v encoding of the info", info.UID, enc)
			}
		default:
			if _, _, err := p.OpenBlob(ctx, r.Blob.FileID); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("blob %s: %v, want not-exist", r.Blob.FileID, err)
			}
		}
	}
	count := func(table string) int {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{prefix + table}.Sanitize()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	nMeta := 0
	models := map[string]bool{}
	for _, r := range recs {
		models[r.Model] = true
	}
	for m := range models {
		nMeta += count(m + "_meta")
	}
	if nMeta != len(metas) || count("resource_data") != len(uids) || count("resource_index") != len(slots) {
		t.Errorf("rows: %d metas, %d data, %d index; want %d, %d, %d", nMeta, count("resource_data"),
			count("resource_index"), len(metas), len(uids), len(slots))
	}
}

// pgCheckMetaRow checks a meta row: data is the meta in the sink's
// encoding and the promoted columns agree with it.
func pgCheckMetaRow(t testing.TB, conn *pgx.Conn, table string, meta *events.ResourceMeta, enc events.Encoding) {
	t.Helper()
	var (
		data                      []byte
		created, updated          time.Time
		createdBy, updatedBy      string
		deleted                   bool
		sv, indexed, rs, rcb, rub *string
		rct, rut                  *time.Time
	)
	err := conn.QueryRow(context.Background(), `SELECT data, created_time, updated_time, created_by, updated_by, is_deleted,
		schema_version, indexed_data::text, rev_status, rev_created_by, rev_updated_by, rev_created_time, rev_updated_time
		FROM `+pgx.Identifier{table}.Sanitize()+` WHERE resource_id = $1`, meta.ResourceID).Scan(
		&data, &created, &updated, &createdBy, &updatedBy, &deleted, &sv, &indexed, &rs, &rcb, &rub, &rct, &rut)
	if err != nil {
		t.Fatalf("%s row %q: %v", table, meta.ResourceID, err)
	}
	where := fmt.Sprintf("%s row %q", table, meta.ResourceID)
	if want, _ := meta.Encode(enc); !bytes.Equal(data, want) {
		t.Errorf("%s: data is not the %v encoding of the meta", where, enc)
	}
	if !created.Equal(meta.CreatedTime.Instant()) || !updated.Equal(meta.UpdatedTime.Instant()) {
		t.Errorf("%s: times %v %v, want %v %v", where, created, updated, meta.CreatedTime.Instant(), meta.UpdatedTime.Instant())
	}
	if created.Location() != time.UTC {
		t.Errorf("%s: created_time read back in %v", where, created.Location())
	}
	if createdBy != meta.CreatedBy || updatedBy != meta.UpdatedBy || deleted != meta.IsDeleted {
		t.Errorf("%s: %q %q %v", where, createdBy, updatedBy, deleted)
	}
	optEq := func(name string, got *string, want events.Opt[string]) {
		if (got != nil) != want.IsSet() || got != nil && *got != want.Value {
			t.Errorf("%s: %s %v, want %+v", where, name, got, want)
		}
	}
	optEq("schema_version", sv, meta.SchemaVersion)
	optEq("rev_status", rs, meta.RevStatus)
	optEq("rev_created_by", rcb, meta.RevCreatedBy)
	optEq("rev_updated_by", rub, meta.RevUpdatedBy)
	timeEq := func(name string, got *time.Time, want events.Opt[events.Time]) {
		if (got != nil) != want.IsSet() || got != nil && !got.Equal(want.Value.Instant()) {
			t.Errorf("%s: %s %v, want %+v", where, name, got, want)
		}
	}
	timeEq("rev_created_time", rct, meta.RevCreatedTime)
	timeEq("rev_updated_time", rut, meta.RevUpdatedTime)
	switch {
	case !meta.IndexedData.Present:
		if indexed != nil {
			t.Errorf("%s: indexed_data %s, want NULL", where, *indexed)
		}
	case indexed == nil:
		t.Errorf("%s: indexed_data is NULL", where)
	default:
		var v events.Value
		if !meta.IndexedData.Null {
			v = meta.IndexedData.Value
		}
		want, err := events.EncodeValue(events.JSON, v)
		if err != nil {
			t.Fatal(err)
		}
		if !pgJSONEqual(t, []byte(*indexed), want) {
			t.Errorf("%s: indexed_data %s, want %s", where, *indexed, want)
		}
	}
}

func pgJSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	parse := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return v
	}
	return reflect.DeepEqual(parse(a), parse(b))
}

// TestPostgresGolden applies every record of the reference archives, in
// both encodings, and reads each back byte-identical; applying them again
// writes nothing (same rows, same xmin).
func TestPostgresGolden(t *testing.T) {
	for _, name := range []string{"small.acbak", "medium.acbak", "msgpack.acbak"} {
		for _, enc := range []struct {
			name string
			opt  events.Opt[events.Encoding]
		}{{"msgpack-default", events.Opt[events.Encoding]{}}, {"json", events.Some(events.JSON)}} {
			for _, w := range pgWriters {
				t.Run(name+"/"+enc.name+"/"+w.name, func(t *testing.T) {
					t.Parallel()
					recs := pgReadArchive(t, name)
					conn := pgAdmin(t)
					prefix := pgPrefix(t)
					opts := Options{Encoding: enc.opt, TablePrefix: prefix, Revisions: true}
					p := pgOpen(t, opts)
					p.copyFrom = w.copyFrom
					pgApply(t, p, recs)
					pgFlush(t, p)
					pgVerify(t, p, conn, prefix, opts, recs)

					rows, xmins := pgDump(t, conn, prefix)
					pgApply(t, p, recs)
					pgFlush(t, p)
					rows2, xmins2 := pgDump(t, conn, prefix)
					if !reflect.DeepEqual(rows, rows2) {
						t.Error("applying the archive again changed rows")
					}
					if !reflect.DeepEqual(xmins, xmins2) {
						t.Error("applying the archive again wrote rows (xmin changed)")
					}
				})
			}
		}
	}
}

// pgWriters are the two ways a Flush writes rows: a batch of upserts, and
// COPY into staging tables (forced here whatever the number of rows).
var pgWriters = []struct {
	name     string
	copyFrom int
}{{"batch", 1 << 30}, {"copy", 1}}

// TestPostgresSchema: the tables, columns and indexes of the contract.
func TestPostgresSchema(t *testing.T) {
	ctx := context.Background()
	conn := pgAdmin(t)
	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix, Revisions: true})
	if err := p.EnsureModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
	if got, want := pgTables(t, conn, prefix), []string{prefix + "issue_meta", prefix + "resource_data", prefix + "resource_index"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("tables %v, want %v", got, want)
	}
	rows, err := conn.Query(ctx, `SELECT indexname::text FROM pg_indexes WHERE schemaname = current_schema() AND starts_with(tablename, $1) ORDER BY 1`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{}
	for _, c := range []string{"created_by", "created_time", "indexed_data_gin", "is_deleted", "rev_created_by", "rev_created_time",
		"rev_status", "rev_updated_by", "rev_updated_time", "updated_by", "updated_time"} {
		want = append(want, pgIndexName(prefix+"issue_meta", c))
	}
	want = append(want, pgIndexName(prefix+"resource_index", "resource_id"))
	want = append(want, prefix+"issue_meta_pkey", prefix+"resource_data_pkey", prefix+"resource_index_pkey")
	if !reflect.DeepEqual(pgSetOf(idx), pgSetOf(want)) {
		t.Errorf("indexes %v, want %v", idx, want)
	}
	// Opening again (a second replicator) changes nothing.
	pgOpen(t, Options{TablePrefix: prefix, Revisions: true}).EnsureModel(ctx, "issue")
	if long := pgIndexName(strings.Repeat("x", 60), "rev_created_time"); len(long) != 63 {
		t.Errorf("long index name %q: %d bytes", long, len(long))
	}
}

func pgSetOf(s []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return m
}

// TestPostgresSchemaEvolution: an older table gains the columns SpecStar
// added later; a table with a conflicting type is refused by name.
func TestPostgresSchemaEvolution(t *testing.T) {
	ctx := context.Background()
	conn := pgAdmin(t)
	prefix := pgPrefix(t)
	old := pgx.Identifier{prefix + "issue_meta"}.Sanitize()
	_, err := conn.Exec(ctx, `CREATE TABLE `+old+` (
		resource_id TEXT PRIMARY KEY, data BYTEA NOT NULL, created_time TIMESTAMP NOT NULL, updated_time TIMESTAMP NOT NULL,
		created_by TEXT NOT NULL, updated_by TEXT NOT NULL, is_deleted BOOLEAN NOT NULL, schema_version TEXT, indexed_data JSONB)`)
	if err != nil {
		t.Fatal(err)
	}
	p := pgOpen(t, Options{TablePrefix: prefix})
	m := sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a")
	m.RevStatus = events.Some("stable")
	m.RevCreatedTime = events.Some(sinktestutil.MustTime(t, "2024-05-01T08:00:00+08:00"))
	if _, err := p.ApplyMeta(ctx, "issue", m); err != nil {
		t.Fatal(err)
	}
	pgFlush(t, p)
	var cols []string
	rows, err := conn.Query(ctx, `SELECT column_name::text FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, prefix+"issue_meta")
	if err != nil {
		t.Fatal(err)
	}
	if cols, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	want := []string{"resource_id", "data", "created_time", "updated_time", "created_by", "updated_by", "is_deleted",
		"schema_version", "indexed_data", "rev_status", "rev_created_by", "rev_updated_by", "rev_created_time", "rev_updated_time"}
	if !reflect.DeepEqual(cols, want) {
		t.Errorf("columns %v, want %v", cols, want)
	}
	pgCheckMetaRow(t, conn, prefix+"issue_meta", m, events.Msgpack)

	// A conflicting type: refused, naming table and column, as an
	// InvalidError (no retry can fix it; see hostile_test.go), and nothing
	// queued.
	bad := prefix + "user_meta"
	_, err = conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{bad}.Sanitize()+` (
		resource_id TEXT PRIMARY KEY, data BYTEA NOT NULL, created_time TIMESTAMP NOT NULL, updated_time TEXT NOT NULL,
		created_by TEXT NOT NULL, updated_by TEXT NOT NULL, is_deleted BOOLEAN NOT NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.ApplyMeta(ctx, "user", sinktestutil.Meta(t, "user:1", "2024-05-01T00:00:00Z", 1, "a"))
	if err == nil || !store.IsInvalid(err) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "updated_time") {
		t.Errorf("conflicting type: %v", err)
	} else {
		t.Logf("conflicting type: %v", err)
	}
	// A missing column SpecStar always had.
	_, err = conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{prefix + "x_meta"}.Sanitize()+` (resource_id TEXT PRIMARY KEY)`)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.EnsureModel(ctx, "x"); err == nil || !strings.Contains(err.Error(), `"data"`) {
		t.Errorf("missing column: %v", err)
	}
	// Resource tables are checked on open.
	rp := pgPrefix(t)
	_, err = conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{rp + "resource_data"}.Sanitize()+` (uid TEXT PRIMARY KEY, data BYTEA NOT NULL, info TEXT NOT NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, pgTestDSN(), Options{TablePrefix: rp, Revisions: true})
	if err == nil || !strings.Contains(err.Error(), rp+"resource_data") || !strings.Contains(err.Error(), `"info"`) {
		t.Errorf("conflicting resource table: %v", err)
	}
}

// TestPostgresInvalid: what Postgres cannot hold, or no table may be
// named, is an InvalidError at Apply (or Open), and never reaches Flush.
func TestPostgresInvalid(t *testing.T) {
	ctx := context.Background()
	for _, opts := range []Options{
		{TablePrefix: "bad-prefix_"},
		{TablePrefix: `x"; DROP TABLE y; --`},
		{TablePrefix: strings.Repeat("p", 50)},
		{MetaTable: "{model}.meta"},
		{MetaTable: "{model}_{x}"},
		{MetaTable: strings.Repeat("m", 64)},
	} {
		if _, err := Open(ctx, pgTestDSN(), opts); !store.IsInvalid(err) {
			t.Errorf("options %+v: %v, want an InvalidError", opts, err)
		}
	}
	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix, Revisions: true})
	good := func() *events.ResourceMeta { return sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a") }
	for name, model := range map[string]string{
		"empty": "", "space": "a b", "quote": `a"b`, "slash": "a/b", "NUL": "a\x00b", "long": strings.Repeat("m", 60),
	} {
		if _, err := p.ApplyMeta(ctx, model, good()); !store.IsInvalid(err) {
			t.Errorf("model %s: %v", name, err)
		}
	}
	metas := map[string]func(m *events.ResourceMeta){
		"empty id":          func(m *events.ResourceMeta) { m.ResourceID = "" },
		"NUL in id":         func(m *events.ResourceMeta) { m.ResourceID = "a\x00" },
		"long id":           func(m *events.ResourceMeta) { m.ResourceID = strings.Repeat("i", 3000) },
		"bad UTF-8":         func(m *events.ResourceMeta) { m.UpdatedBy = "\xff" },
		"NUL in rev_status": func(m *events.ResourceMeta) { m.RevStatus = events.Some("a\x00") },
		"NUL in indexed": func(m *events.ResourceMeta) {
			m.IndexedData = events.Some[events.Value](events.Map{{Key: "k", Value: "\x00"}})
		},
		"NUL in key": func(m *events.ResourceMeta) {
			m.IndexedData = events.Some[events.Value](events.Map{{Key: "\x00", Value: 1.0}})
		},
		"ext in indexed": func(m *events.ResourceMeta) { m.IndexedData = events.Some[events.Value](events.Ext{Type: 9}) },
	}
	for name, mutate := range metas {
		m := good()
		mutate(m)
		if _, err := p.ApplyMeta(ctx, "issue", m); !store.IsInvalid(err) {
			t.Errorf("meta %s: %v", name, err)
		}
	}
	const uid = "11111111-2222-4333-8444-555555555555"
	revs := map[string]func(r *events.RawResource){
		"uid":              func(r *events.RawResource) { r.Info.UID = "not-a-uuid" },
		"__none__":         func(r *events.RawResource) { r.Info.SchemaVersion = events.Some("__none__") },
		"NUL revision_id":  func(r *events.RawResource) { r.Info.RevisionID = "x\x00" },
		"empty revisionid": func(r *events.RawResource) { r.Info.RevisionID = "" },
		"long key": func(r *events.RawResource) {
			r.Info.RevisionID = strings.Repeat("r", 1500)
			r.Info.ResourceID = strings.Repeat("r", 1500)
		},
	}
	for name, mutate := range revs {
		r := sinktestutil.Revision(t, "issue:1", "issue:1:1", uid, events.Null[string](), events.Opt[string]{}, "2024-05-01T00:00:00Z", "{}")
		mutate(r)
		if _, err := p.ApplyRevision(ctx, "issue", r); !store.IsInvalid(err) {
			t.Errorf("revision %s: %v", name, err)
		}
	}
	// Nothing was queued: a good record still goes through.
	if _, err := p.ApplyMeta(ctx, "issue", good()); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Meta(ctx, "issue", "issue:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Meta(ctx, "issue", "issue:2"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent meta: %v", err)
	}
	if _, err := p.Meta(ctx, "nomodel", "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent table: %v", err)
	}
	if _, _, err := p.Revision(ctx, "issue", "issue:1", "issue:1:1", events.Null[string]()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent revision: %v", err)
	}
}

// TestPostgresIndexedData: datetimes become ISO strings and bytes base64,
// as msgspec's JSON encoder writes them; None is JSON null, UNSET NULL.
func TestPostgresIndexedData(t *testing.T) {
	ctx := context.Background()
	conn := pgAdmin(t)
	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix})
	m := sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a")
	m.IndexedData = events.Some[events.Value](events.Map{
		{Key: "when", Value: sinktestutil.MustTime(t, "2024-05-01T10:00:00.5+02:00")},
		{Key: "raw", Value: []byte{0, 255}},
		{Key: "big", Value: uint64(18446744073709551615)},
		{Key: "nan", Value: math.NaN()},
		{Key: "日本", Value: []any{"é", nil, true}},
	})
	none := sinktestutil.Meta(t, "issue:2", "2024-05-01T00:00:00Z", 1, "a")
	none.IndexedData = events.Null[events.Value]()
	unset := sinktestutil.Meta(t, "issue:3", "2024-05-01T00:00:00Z", 1, "a")
	unset.IndexedData = events.Opt[events.Value]{}
	for _, x := range []*events.ResourceMeta{m, none, unset} {
		if _, err := p.ApplyMeta(ctx, "issue", x); err != nil {
			t.Fatal(err)
		}
	}
	pgFlush(t, p)
	var got string
	err := conn.QueryRow(ctx, `SELECT indexed_data::text FROM `+pgx.Identifier{prefix + "issue_meta"}.Sanitize()+` WHERE resource_id = 'issue:1'`).Scan(&got)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"nan": null, "raw": "AP8=", "big": 18446744073709551615, "when": "2024-05-01T10:00:00.500000+02:00", "日本": ["é", null, true]}`
	if !pgJSONEqual(t, []byte(got), []byte(want)) {
		t.Errorf("indexed_data %s, want %s", got, want)
	}
	for _, x := range []*events.ResourceMeta{m, none, unset} {
		pgCheckMetaRow(t, conn, prefix+"issue_meta", x, events.Msgpack)
	}
}

// TestPostgresMetaOrder: a meta replaces the stored one only if newer,
// whatever order the two arrive in, in one Flush or in two.
func TestPostgresMetaOrder(t *testing.T) {
	cases := []struct {
		name   string
		a, b   [3]string // updated time, count, updated_by
		winner int       // 0: a, 1: b
	}{
		{"newer time", [3]string{"2024-05-02T00:00:00Z", "1", "a"}, [3]string{"2024-05-01T00:00:00Z", "2", "b"}, 0},
		{"same time, more revisions", [3]string{"2024-05-01T00:00:00Z", "1", "a"}, [3]string{"2024-05-01T00:00:00Z", "2", "b"}, 1},
		{"naive read as UTC", [3]string{"2024-05-01T09:00:00+00:00", "1", "a"}, [3]string{"2024-05-01T10:00:00", "1", "b"}, 1},
		{"offset instant", [3]string{"2024-05-01T10:00:00", "1", "a"}, [3]string{"2024-05-01T11:00:00+02:00", "1", "b"}, 0},
		{"exact tie: bytes", [3]string{"2024-05-01T10:00:00Z", "1", "a"}, [3]string{"2024-05-01T10:00:00Z", "1", "b"}, 1},
	}
	ctx := context.Background()
	conn := pgAdmin(t)
	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix})
	for i, c := range cases {
		metas := [2]*events.ResourceMeta{}
		for j, s := range [][3]string{c.a, c.b} {
			var n int64
			fmt.Sscan(s[1], &n)
			metas[j] = sinktestutil.Meta(t, "", s[0], n, s[2])
		}
		for _, order := range [][2]int{{0, 1}, {1, 0}} {
			for _, together := range []bool{false, true} {
				rid := fmt.Sprintf("issue:%d:%v:%v", i, order, together)
				for _, j := range order {
					m := *metas[j]
					m.ResourceID = rid
					if _, err := p.ApplyMeta(ctx, "issue", &m); err != nil {
						t.Fatal(err)
					}
					if !together {
						pgFlush(t, p)
					}
				}
				pgFlush(t, p)
				got, err := p.Meta(ctx, "issue", rid)
				if err != nil {
					t.Fatal(err)
				}
				if got.UpdatedBy != metas[c.winner].UpdatedBy {
					t.Errorf("%s, order %v, one flush %v: %s stayed", c.name, order, together, got.UpdatedBy)
				}
			}
		}
	}
	// An older meta after a newer one writes nothing.
	newer := sinktestutil.Meta(t, "issue:x", "2024-05-02T00:00:00Z", 2, "newer")
	older := sinktestutil.Meta(t, "issue:x", "2024-05-01T00:00:00Z", 1, "older")
	if _, err := p.ApplyMeta(ctx, "issue", newer); err != nil {
		t.Fatal(err)
	}
	pgFlush(t, p)
	rows, xmins := pgDump(t, conn, prefix)
	if _, err := p.ApplyMeta(ctx, "issue", older); err != nil {
		t.Fatal(err)
	}
	pgFlush(t, p)
	rows2, xmins2 := pgDump(t, conn, prefix)
	if !reflect.DeepEqual(rows, rows2) || !reflect.DeepEqual(xmins, xmins2) {
		t.Error("an older meta changed the table")
	}
}

// TestPostgresConcurrentWorkers: two sinks (two pools, as two replicators)
// race older and newer metas of the same resources; the newer always
// stays.
func TestPostgresConcurrentWorkers(t *testing.T) {
	for _, w := range pgWriters {
		t.Run(w.name, func(t *testing.T) { pgConcurrentWorkers(t, w.copyFrom) })
	}
}

func pgConcurrentWorkers(t *testing.T, copyFrom int) {
	ctx := context.Background()
	prefix := pgPrefix(t)
	opts := Options{TablePrefix: prefix}
	sinks := [2]*Sink{pgOpen(t, opts), pgOpen(t, opts)}
	sinks[0].copyFrom, sinks[1].copyFrom = copyFrom, copyFrom
	const resources, rounds = 200, 10
	for round := 0; round < rounds; round++ {
		older := fmt.Sprintf("2024-05-01T00:%02d:00Z", 2*round)
		newer := fmt.Sprintf("2024-05-01T00:%02d:00Z", 2*round+1)
		var wg, applied sync.WaitGroup
		start, flush := make(chan struct{}), make(chan struct{})
		for w := 0; w < 2; w++ {
			wg.Add(1)
			applied.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < resources; i++ {
					// Worker 1 goes through the resources backwards, so
					// the two lock in different orders if they can.
					rid := i
					if w == 1 {
						rid = resources - 1 - i
					}
					updated, by := older, "older"
					if (rid+w+round)%2 == 0 {
						updated, by = newer, "newer"
					}
					m := sinktestutil.Meta(t, fmt.Sprintf("issue:%03d", rid), updated, int64(round+1), by)
					if _, err := sinks[w].ApplyMeta(ctx, "issue", m); err != nil {
						t.Error(err)
					}
				}
				applied.Done()
				<-flush // both Flushes start together
				pgFlush(t, sinks[w])
			}()
		}
		close(start)
		applied.Wait()
		close(flush)
		wg.Wait()
		for i := 0; i < resources; i++ {
			m, err := sinks[0].Meta(ctx, "issue", fmt.Sprintf("issue:%03d", i))
			if err != nil {
				t.Fatal(err)
			}
			if m.UpdatedBy != "newer" || !m.UpdatedTime.Instant().Equal(sinktestutil.MustTime(t, newer).Instant()) {
				t.Fatalf("round %d resource %d: %s at %s stayed", round, i, m.UpdatedBy, m.UpdatedTime.Format())
			}
		}
	}
}

// TestPostgresRevisions: the Disk sink's rules for uids and index rows,
// whatever the order, in one Flush or several, and the same reads as a
// Disk sink given the same records.
func TestPostgresRevisions(t *testing.T) {
	const uid1 = "11111111-2222-4333-8444-555555555555"
	const uid2 = "11111111-2222-4333-8444-666666666666"
	none := events.Null[string]()
	v1, v2 := events.Some("v1"), events.Some("v2")
	unset := events.Opt[string]{}
	type rev struct {
		uid       string
		sv, psv   events.Opt[string]
		updated   string
		data      string
		resultUID string // the uid its slot must name at the end
	}
	cases := []struct {
		name string
		revs []rev
		// want: slot -> data of the revision it reads back
		want map[string]string
	}{
		{"migration keeps the uid", []rev{
			{uid1, v1, unset, "2024-05-01T00:00:00Z", `{"v":1}`, uid1},
			{uid1, v2, v1, "2024-05-01T00:00:00Z", `{"v":2}`, uid1},
		}, map[string]string{"v_v1": `{"v":2}`, "v_v2": `{"v":2}`}},
		{"draft modified in place", []rev{
			{uid1, none, unset, "2024-05-01T00:00:00Z", `{"d":1}`, uid2},
			{uid2, none, unset, "2024-05-01T00:00:01Z", `{"d":2}`, uid2},
		}, map[string]string{"no_ver": `{"d":2}`}},
		{"same uid, later updated_time", []rev{
			{uid1, none, unset, "2024-05-01T00:00:00Z", `{"d":1}`, uid1},
			{uid1, none, unset, "2024-05-01T00:00:05Z", `{"d":5}`, uid1},
		}, map[string]string{"no_ver": `{"d":5}`}},
	}
	ctx := context.Background()
	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix, Revisions: true})
	n := 0
	for _, c := range cases {
		for _, reverse := range []bool{false, true} {
			for _, together := range []bool{false, true} {
				n++
				rid := fmt.Sprintf("issue:%d", n)
				// Fresh uids per run: they are global in resource_data.
				uids := map[string]string{uid1: pgUUID(), uid2: pgUUID()}
				d := openDisk(t, t.TempDir(), disk.Options{Encoding: events.Msgpack})
				order := c.revs
				if reverse {
					order = []rev{c.revs[1], c.revs[0]}
				}
				for _, r := range order {
					res := sinktestutil.Revision(t, rid, rid+":1", uids[r.uid], r.sv, r.psv, r.updated, r.data)
					if _, err := p.ApplyRevision(ctx, "issue", res); err != nil {
						t.Fatal(err)
					}
					if _, err := d.ApplyRevision(ctx, "issue", res); err != nil {
						t.Fatal(err)
					}
					if !together {
						pgFlush(t, p)
					}
				}
				pgFlush(t, p)
				for _, r := range c.revs {
					info, data, err := p.Revision(ctx, "issue", rid, rid+":1", r.sv)
					if err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
					if want := c.want[store.SchemaDir(r.sv)]; string(data) != want || info.UID != uids[r.resultUID] {
						t.Errorf("%s (reverse %v, one flush %v): slot %s reads %s of %s, want %s of %s",
							c.name, reverse, together, store.SchemaDir(r.sv), data, info.UID, want, uids[r.resultUID])
					}
					dinfo, ddata, err := d.Revision(ctx, "issue", rid, rid+":1", r.sv)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(ddata, data) || !reflect.DeepEqual(dinfo, info) {
						t.Errorf("%s (reverse %v, one flush %v): slot %s: Disk and Postgres differ", c.name, reverse, together, store.SchemaDir(r.sv))
					}
				}
			}
		}
	}
}

func pgUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// TestPostgresOnDuplicate: SpecStar's restore strategies.
func TestPostgresOnDuplicate(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		strategy  string
		out       store.Outcome
		invalid   bool
		keepFirst bool
		revision  store.Outcome
	}{
		{strategy: "", out: store.Written, keepFirst: true, revision: store.Written},
		{strategy: "overwrite", out: store.Written, revision: store.Written},
		{strategy: "skip", out: store.Skipped, keepFirst: true, revision: store.Skipped},
		{strategy: "raise_error", invalid: true, keepFirst: true, revision: store.Written},
	} {
		name := c.strategy
		if name == "" {
			name = "newer"
		}
		t.Run(name, func(t *testing.T) {
			prefix := pgPrefix(t)
			p := pgOpen(t, Options{TablePrefix: prefix, Revisions: true, OnDuplicate: c.strategy})
			stored := sinktestutil.Meta(t, "issue:1", "2024-05-02T00:00:00Z", 2, "newer")
			if _, err := p.ApplyMeta(ctx, "issue", stored); err != nil {
				t.Fatal(err)
			}
			pgFlush(t, p)
			incoming := sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "older")
			out, err := p.ApplyMeta(ctx, "issue", incoming)
			if c.invalid {
				if !store.IsInvalid(err) {
					t.Fatalf("want an InvalidError, got %v %v", out, err)
				}
			} else if err != nil || out != c.out {
				t.Fatalf("got %v %v, want %v", out, err, c.out)
			}
			uid := pgUUID()
			rev := sinktestutil.Revision(t, "issue:1", "issue:1:1", uid, events.Null[string](), events.Opt[string]{}, "2024-05-01T00:00:00Z", `{"a":1}`)
			if out, err := p.ApplyRevision(ctx, "issue", rev); err != nil || out != c.revision {
				t.Errorf("revision: %v %v, want %v", out, err, c.revision)
			}
			pgFlush(t, p)
			want := incoming
			if c.keepFirst {
				want = stored
			}
			got, err := p.Meta(ctx, "issue", "issue:1")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sinktestutil.Enc(t, got), sinktestutil.Enc(t, want)) {
				t.Errorf("stored meta by %s, want %s", got.UpdatedBy, want.UpdatedBy)
			}
			_, _, err = p.Revision(ctx, "issue", "issue:1", "issue:1:1", events.Null[string]())
			if written := err == nil; written != (c.revision == store.Written) {
				t.Errorf("revision written: %v (%v)", written, err)
			}
			if c.strategy == "skip" || c.strategy == "raise_error" {
				// Identical: never a duplicate.
				if out, err := p.ApplyMeta(ctx, "issue", want); err != nil || out != store.Unchanged {
					t.Errorf("identical meta: %v %v", out, err)
				}
				// Two different metas of a new resource in one batch: the
				// second is the duplicate.
				a := sinktestutil.Meta(t, "issue:2", "2024-05-01T00:00:00Z", 1, "a")
				b := sinktestutil.Meta(t, "issue:2", "2024-05-02T00:00:00Z", 2, "b")
				if out, err := p.ApplyMeta(ctx, "issue", a); err != nil || out != store.Written {
					t.Errorf("first: %v %v", out, err)
				}
				out, err := p.ApplyMeta(ctx, "issue", b)
				if c.strategy == "skip" && (err != nil || out != store.Skipped) || c.strategy == "raise_error" && !store.IsInvalid(err) {
					t.Errorf("second: %v %v", out, err)
				}
				pgFlush(t, p)
				if got, err := p.Meta(ctx, "issue", "issue:2"); err != nil || got.UpdatedBy != "a" {
					t.Errorf("issue:2: %v %v", got, err)
				}
			}
		})
	}
}

// TestPostgresFlushFailureKeepsQueue: a Flush that fails (here: a lock
// held past its deadline) keeps what was applied, and the retried Flush
// writes it.
func TestPostgresFlushFailureKeepsQueue(t *testing.T) {
	ctx := context.Background()
	conn := pgAdmin(t)
	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix})
	if err := p.EnsureModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a")); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{prefix + "issue_meta"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = p.Flush(short)
	cancel()
	if err == nil || store.IsInvalid(err) {
		t.Fatalf("flush under a lock: %v, want a transient error", err)
	}
	tx.Rollback(ctx)
	if _, err := p.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, "issue:2", "2024-05-01T00:00:00Z", 1, "a")); err != nil {
		t.Fatal(err)
	}
	pgFlush(t, p)
	for _, rid := range []string{"issue:1", "issue:2"} {
		if _, err := p.Meta(ctx, "issue", rid); err != nil {
			t.Errorf("%s: %v", rid, err)
		}
	}

	// Tables dropped behind the sink's back are created again.
	rp := pgPrefix(t)
	q := pgOpen(t, Options{TablePrefix: rp, Revisions: true})
	if _, err := q.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a")); err != nil {
		t.Fatal(err)
	}
	pgFlush(t, q)
	for _, table := range pgTables(t, conn, rp) {
		if _, err := conn.Exec(ctx, "DROP TABLE "+pgx.Identifier{table}.Sanitize()+" CASCADE"); err != nil {
			t.Fatal(err)
		}
	}
	rev := sinktestutil.Revision(t, "issue:3", "issue:3:1", pgUUID(), events.Null[string](), events.Opt[string]{}, "2024-05-01T00:00:00Z", "{}")
	if _, err := q.ApplyRevision(ctx, "issue", rev); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, "issue:3", "2024-05-01T00:00:00Z", 1, "a")); err != nil {
		t.Fatal(err)
	}
	if err := q.Flush(ctx); err == nil {
		t.Error("flush into dropped tables succeeded")
	} else {
		t.Logf("flush into dropped tables: %v", err)
	}
	pgFlush(t, q)
	if _, err := q.Meta(ctx, "issue", "issue:3"); err != nil {
		t.Error(err)
	}
	if _, _, err := q.Revision(ctx, "issue", "issue:3", "issue:3:1", events.Null[string]()); err != nil {
		t.Error(err)
	}
}

// TestPostgresDroppedConnection: the server ends the sink's connections
// between Apply and Flush, and again during a Flush; retried Flushes lose
// nothing.
func TestPostgresDroppedConnection(t *testing.T) {
	ctx := context.Background()
	conn := pgAdmin(t)
	prefix := pgPrefix(t)
	app := "pgtest_" + pgRandom()
	opts := Options{TablePrefix: prefix, Revisions: true}
	p := pgOpen(t, opts, "application_name="+app)
	recs := pgReadArchive(t, "medium.acbak")
	half := len(recs) / 2
	terminate := func() int {
		// Only this test's connections: other tests (and packages) share
		// the database.
		var n int
		err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = $1`, app).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Between Apply and Flush.
	pgApply(t, p, recs[:half])
	if n := terminate(); n == 0 {
		t.Fatal("no connection of the sink to terminate")
	}
	failures := 0
	for i := 0; ; i++ {
		err := p.Flush(ctx)
		if err == nil {
			break
		}
		failures++
		t.Logf("flush after terminate: %v", err)
		if i == 20 {
			t.Fatal("flush keeps failing")
		}
	}

	// During a Flush: terminate repeatedly while it runs.
	pgApply(t, p, recs[half:])
	done := make(chan struct{})
	var killed int
	go func() {
		defer close(done)
		for i := 0; i < 5; i++ {
			time.Sleep(time.Duration(i*3) * time.Millisecond)
			var n int
			// A separate connection: conn belongs to the test goroutine.
			c, err := pgx.Connect(ctx, pgTestDSN())
			if err != nil {
				return
			}
			_ = c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = $1`, app).Scan(&n)
			c.Close(ctx)
			killed += n
		}
	}()
	for i := 0; ; i++ {
		err := p.Flush(ctx)
		if err == nil {
			break
		}
		failures++
		t.Logf("flush during terminations: %v", err)
		if i == 50 {
			t.Fatal("flush keeps failing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	<-done
	t.Logf("%d failed flushes, %d connections killed during flushes", failures, killed)
	// Read back through a sink of its own: the terminations may have gone
	// on after the last Flush and left p's pool holding a dead connection,
	// which says nothing about what was stored.
	pgVerify(t, pgOpen(t, opts), conn, prefix, opts, recs)
}

// BenchmarkPostgresFlush compares the two ways a Flush writes rows: a
// pipelined batch of one upsert per row, and COPY into staging tables
// followed by set-based UPDATE/INSERT. Each op flushes n new resources, a
// meta and a revision each (3n rows); "replay" flushes them again (no
// row changes: reads only).
func BenchmarkPostgresFlush(b *testing.B) {
	for _, n := range []int{64, 256, 1024, 4096} {
		for _, w := range pgWriters {
			b.Run(fmt.Sprintf("%s/records=%d", w.name, 2*n), func(b *testing.B) {
				pgBenchFlush(b, n, w.copyFrom, false)
			})
		}
		b.Run(fmt.Sprintf("replay/records=%d", 2*n), func(b *testing.B) {
			pgBenchFlush(b, n, 1<<30, true)
		})
	}
}

func pgBenchFlush(b *testing.B, n, copyFrom int, replay bool) {
	ctx := context.Background()
	prefix := pgPrefix(b)
	p := pgOpen(b, Options{TablePrefix: prefix, Revisions: true})
	p.copyFrom = copyFrom
	when, err := events.ParseTime("2024-05-01T00:00:00Z")
	if err != nil {
		b.Fatal(err)
	}
	batch := func(iter int) {
		for i := 0; i < n; i++ {
			rid := fmt.Sprintf("issue:%d:%d", iter, i)
			m := &events.ResourceMeta{
				CurrentRevisionID: rid + ":1", ResourceID: rid, SchemaVersion: events.Null[string](),
				TotalRevisionCount: 1, CreatedTime: when, UpdatedTime: when, CreatedBy: "bench", UpdatedBy: "bench",
				IndexedData: events.Some[events.Value](events.Map{{Key: "title", Value: fmt.Sprintf("issue %d", i)}}),
			}
			if _, err := p.ApplyMeta(ctx, "issue", m); err != nil {
				b.Fatal(err)
			}
			data := fmt.Sprintf(`{"title":"issue %d","body":"%s"}`, i, strings.Repeat("x", 200))
			r := &events.RawResource{
				Info: events.RevisionInfo{
					UID: pgUUID(), ResourceID: rid, RevisionID: rid + ":1", ParentRevisionID: events.Null[string](),
					SchemaVersion: events.Null[string](), DataHash: events.Some(dedup.DataHash([]byte(data))),
					Status: "stable", CreatedTime: when, UpdatedTime: when, CreatedBy: "bench", UpdatedBy: "bench",
				},
				RawData: []byte(data),
			}
			if _, err := p.ApplyRevision(ctx, "issue", r); err != nil {
				b.Fatal(err)
			}
		}
	}
	if replay {
		batch(0)
		pgFlush(b, p)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if replay {
			p.mu.Lock()
			p.queue = nil
			p.mu.Unlock()
			batch(0)
		} else {
			batch(i + 1)
		}
		b.StartTimer()
		if err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(2*n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// openDisk opens a disk sink to compare with: the Postgres sink follows
// the disk sink's rules for uids and index rows.
func openDisk(t *testing.T, root string, opts disk.Options) *disk.Sink {
	t.Helper()
	d, err := disk.Open(context.Background(), root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestPostgresFreshGuessWrong: a sink that has only ever seen new rows
// (fresh) writes its next large Flush without reading, by COPY. When
// another writer has meanwhile stored newer metas of some of those
// resources, and older ones of others, the guess is wrong: the newer
// stored metas stay, the older ones are replaced, and the new resources
// are written, as a Flush that read first would leave them.
func TestPostgresFreshGuessWrong(t *testing.T) {
	ctx := context.Background()
	prefix := pgPrefix(t)
	opts := Options{TablePrefix: prefix}
	a, other := pgOpen(t, opts), pgOpen(t, opts)
	a.copyFrom = 10
	const n = 40
	rid := func(i int) string { return fmt.Sprintf("issue:%03d", i) }
	// a writes resources 0..n-1: all new, so a is fresh afterwards
	for i := 0; i < n; i++ {
		if _, err := a.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, rid(i), "2024-05-01T00:00:00Z", 1, "first")); err != nil {
			t.Fatal(err)
		}
	}
	pgFlush(t, a)
	if !a.fresh {
		t.Fatal("a Flush of new rows only left the sink not fresh")
	}
	// another writer stores resources n..2n-1: the even ones newer than
	// what a will write, the odd ones older
	for i := n; i < 2*n; i++ {
		updated, by := "2024-05-01T00:05:00Z", "other-newer"
		if i%2 == 1 {
			updated, by = "2024-05-01T00:01:00Z", "other-older"
		}
		if _, err := other.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, rid(i), updated, 1, by)); err != nil {
			t.Fatal(err)
		}
	}
	pgFlush(t, other)
	// a's next Flush: resources n..3n-1 at 00:03, decided without reading
	for i := n; i < 3*n; i++ {
		if _, err := a.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, rid(i), "2024-05-01T00:03:00Z", 1, "a")); err != nil {
			t.Fatal(err)
		}
	}
	pgFlush(t, a)
	for i := n; i < 3*n; i++ {
		want := "a"
		if i < 2*n && i%2 == 0 {
			want = "other-newer"
		}
		m, err := a.Meta(ctx, "issue", rid(i))
		if err != nil {
			t.Fatal(err)
		}
		if m.UpdatedBy != want {
			t.Errorf("%s: updated_by %q stayed, want %q", rid(i), m.UpdatedBy, want)
		}
	}
	if a.fresh {
		t.Error("a Flush that found stored rows left the sink fresh")
	}
}

// TestPostgresSealedFlush: FlushSealed writes what was applied before
// Seal and leaves what was applied after it for the next flush, as the
// worker's overlapped batches need (one written while the next is
// applied); a Flush writes everything.
func TestPostgresSealedFlush(t *testing.T) {
	ctx := context.Background()
	p := pgOpen(t, Options{TablePrefix: pgPrefix(t)})
	if !p.OverlapsFlush() {
		t.Fatal("the default sink does not overlap its flushes")
	}
	if pgOpen(t, Options{TablePrefix: pgPrefix(t), OnDuplicate: "skip"}).OverlapsFlush() {
		t.Error("an on_duplicate=skip sink overlaps its flushes, whose Apply reads what a flush moves")
	}
	apply := func(rid string) {
		if _, err := p.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, rid, "2024-05-01T00:00:00Z", 1, "a")); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(rid string) bool {
		_, err := p.Meta(ctx, "issue", rid)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}
	apply("issue:1")
	p.Seal()
	apply("issue:2")
	if err := p.FlushSealed(ctx); err != nil {
		t.Fatal(err)
	}
	if !stored("issue:1") || stored("issue:2") {
		t.Fatalf("after FlushSealed: issue:1 stored %v (want true), issue:2 stored %v (want false)", stored("issue:1"), stored("issue:2"))
	}
	pgFlush(t, p)
	if !stored("issue:2") {
		t.Error("a Flush left what was applied after Seal unwritten")
	}
}
