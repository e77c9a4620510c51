package disk

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/sqlitemeta"
	"github.com/specstar/replicator/sink/internal/store"
)

// TestSQLiteRevColumns: the contract's rev_* columns mirror the meta's
// rev_* fields, NULL when UNSET; indexed_data is NULL when UNSET.
func TestSQLiteRevColumns(t *testing.T) {
	ctx := context.Background()
	d := openDisk(t, t.TempDir(), Options{Encoding: events.Msgpack, SQLiteMeta: true})
	m := sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a")
	m.RevStatus = events.Some("draft")
	m.RevCreatedBy = events.Some("carol")
	m.RevUpdatedBy = events.Some("dave")
	m.RevCreatedTime = events.Some(sinktestutil.MustTime(t, "2024-09-09T09:09:28.843981Z"))
	m.RevUpdatedTime = events.Some(sinktestutil.MustTime(t, "2024-09-10T01:02:03.456789"))
	m.SchemaVersion = events.Some("v3")
	m.IsDeleted = true
	bare := sinktestutil.Meta(t, "issue:2", "2024-05-01T00:00:00Z", 1, "a")
	bare.IndexedData = events.Opt[events.Value]{}
	for _, x := range []*events.ResourceMeta{m, bare} {
		if _, err := d.ApplyMeta(ctx, "issue", x); err != nil {
			t.Fatal(err)
		}
	}
	db := openRO(t, filepath.Join(d.Root(), "issue", "meta.db"))
	var (
		status, cb, ub, sv, indexed sql.NullString
		ct, ut                      sql.NullFloat64
		deleted                     int64
	)
	row := db.QueryRow(`SELECT rev_status, rev_created_by, rev_updated_by, rev_created_time, rev_updated_time, schema_version, is_deleted, indexed_data FROM resource_meta WHERE resource_id = 'issue:1'`)
	if err := row.Scan(&status, &cb, &ub, &ct, &ut, &sv, &deleted, &indexed); err != nil {
		t.Fatal(err)
	}
	if status.String != "draft" || cb.String != "carol" || ub.String != "dave" || ct.Float64 != 1725872968.843981 ||
		ut.Float64 != 1725930123.456789 || sv.String != "v3" || deleted != 1 || indexed.String != `{"title": "t"}` {
		t.Errorf("row: %v %v %v %v %v %v %v %v", status, cb, ub, ct, ut, sv, deleted, indexed)
	}
	row = db.QueryRow(`SELECT rev_status, rev_created_by, rev_updated_by, rev_created_time, rev_updated_time, schema_version, indexed_data FROM resource_meta WHERE resource_id = 'issue:2'`)
	if err := row.Scan(&status, &cb, &ub, &ct, &ut, &sv, &indexed); err != nil {
		t.Fatal(err)
	}
	if status.Valid || cb.Valid || ub.Valid || ct.Valid || ut.Valid || sv.Valid || indexed.Valid {
		t.Errorf("UNSET/None fields not NULL: %v %v %v %v %v %v %v", status, cb, ub, ct, ut, sv, indexed)
	}
	// A datetime in indexed_data cannot be json.dumps'ed: refused for good.
	bad := sinktestutil.Meta(t, "issue:3", "2024-05-01T00:00:00Z", 1, "a")
	bad.IndexedData = events.Some[events.Value](events.Map{{Key: "due", Value: sinktestutil.MustTime(t, "2024-01-01T00:00:00Z")}})
	if _, err := d.ApplyMeta(ctx, "issue", bad); !store.IsInvalid(err) {
		t.Errorf("datetime in indexed_data: %v", err)
	}
}

// TestSQLiteUpgradesReferenceFile: a meta.db SpecStar wrote (nine columns)
// gains the rev_* columns and indexes as SpecStar's newer versions add
// them, and keeps its rows.
func TestSQLiteUpgradesReferenceFile(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	src := testfixtures.Read(t, "disk-layout", "sqlite-msgpack", "issue", "meta.db")
	if err := os.MkdirAll(filepath.Join(root, "issue"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "issue", "meta.db"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	d := openDisk(t, root, Options{Encoding: events.Msgpack, SQLiteMeta: true})
	recs := readArchive(t, "sqlite-msgpack")
	for _, r := range recs {
		if r.Meta == nil {
			continue
		}
		if out, err := d.ApplyMeta(ctx, r.Model, r.Meta); err != nil || out != store.Unchanged {
			t.Errorf("%s: %v %v", r.Meta.ResourceID, out, err)
		}
	}
	db := openRO(t, filepath.Join(root, "issue", "meta.db"))
	var tableSQL string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'resource_meta'`).Scan(&tableSQL); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(tableSQL, "-- JSON 格式的索引數據\n            , rev_status TEXT, rev_created_by TEXT, rev_updated_by TEXT, rev_created_time REAL, rev_updated_time REAL)") {
		t.Errorf("table after upgrade: %q", tableSQL)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'idx_%'`).Scan(&n); err != nil || n != 10 {
		t.Errorf("%d indexes, %v", n, err)
	}
	var metas []record
	for _, r := range recs {
		if r.Meta != nil {
			metas = append(metas, r)
		}
	}
	checkReadBack(t, d, metas)
}

func TestSQLiteURI(t *testing.T) {
	got := sqlitemeta.URI("/a b/m?x#y%z:é/meta.db", nil)
	if want := "file:/a%20b/m%3Fx%23y%25z%3A%C3%A9/meta.db?"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	// A model name full of URI syntax still gets its own file.
	ctx := context.Background()
	d := openDisk(t, t.TempDir(), Options{SQLiteMeta: true})
	if _, err := d.ApplyMeta(ctx, "we?ird#mo%del", sinktestutil.Meta(t, "x:1", "2024-05-01T00:00:00Z", 1, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Root(), "we?ird#mo%del", "meta.db")); err != nil {
		t.Error(err)
	}
	if _, err := d.Meta(ctx, "we?ird#mo%del", "x:1"); err != nil {
		t.Error(err)
	}
}

// TestReadMetaStoreWithoutTable: a reader (verify, a disk source) that
// opened a meta.db its writer had just created, before the schema was
// committed, failed with "no such table: resource_meta"; such a store
// holds no metas, and reads now say so.
func TestReadMetaStoreWithoutTable(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "issue"), 0o755); err != nil {
		t.Fatal(err)
	}
	// SQLite's own first step: the file exists, empty, with no table.
	if err := os.WriteFile(filepath.Join(root, "issue", "meta.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := openT(t, root, Options{ReadOnly: true, SQLiteMeta: true})
	if _, err := d.Meta(ctx, "issue", "issue:1"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Meta from a store without its table: %v, want fs.ErrNotExist", err)
	}
	for id, err := range d.ResourceIDs(ctx, "issue") {
		t.Fatalf("a store without its table lists %q, %v", id, err)
	}
}
