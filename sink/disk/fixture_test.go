package disk

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/sqlitemeta"
	"github.com/specstar/replicator/sink/internal/store"
)

// variant is one tree of fixtures/disk-layout: the options that make a Disk
// write what that SpecStar deployment wrote, and which of the reference
// tree's entries an archive replay cannot reproduce (see expect.json's
// summary: upstream leftovers).
type variant struct {
	name string
	opts Options
	// store dirs and index links of the reference tree that no archive
	// record produces
	missingStore, missingLinks int
}

var variants = []variant{
	// a purged resource's store dir and link (purge_resource bug) and the
	// store dir a draft modify() orphaned
	{name: "factory-json", opts: Options{Encoding: events.JSON}, missingStore: 2, missingLinks: 1},
	// migrate() keeps the uid: the dump carries the migrated revision
	// twice at v2, never at v1, so the v_v1 link is not reproduced
	{name: "factory-msgpack", opts: Options{Encoding: events.JSON}, missingLinks: 1},
	{name: "sqlite-msgpack", opts: Options{Encoding: events.Msgpack, SQLiteMeta: true}},
}

// record is one decoded record of a fixture archive.
type record = sinktestutil.Record

// readArchive reads a disk-layout variant's archive.
func readArchive(t *testing.T, name string) []record {
	t.Helper()
	return sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, "disk-layout", name+".acbak"))
}

func applyAll(t *testing.T, d *Sink, recs []record) []store.Outcome {
	t.Helper()
	ctx := context.Background()
	var outs []store.Outcome
	for _, r := range recs {
		var (
			out store.Outcome
			err error
		)
		switch {
		case r.Meta != nil:
			out, err = d.ApplyMeta(ctx, r.Model, r.Meta)
		case r.Rev != nil:
			out, err = d.ApplyRevision(ctx, r.Model, r.Rev)
		default:
			b := r.Blob
			out, err = d.ApplyBlob(ctx, b.FileID, b.Size, b.ContentType, bytes.NewReader(b.BlobData))
		}
		if err != nil {
			t.Fatalf("apply %s record: %v", r.Model, err)
		}
		outs = append(outs, out)
	}
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return outs
}

func openDisk(t *testing.T, root string, opts Options) *Sink {
	t.Helper()
	d, err := Open(context.Background(), root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// expectTree is the part of disk-layout/expect.json the tests use.
type expectTree struct {
	Summary map[string]struct {
		ResourceDirsWithoutMeta []string `json:"resource_dirs_without_meta"`
		OrphanStoreUIDs         []string `json:"orphan_store_uids"`
		UIDsReferencedBySeveral []string `json:"uids_referenced_by_several_links"`
		Links                   map[string]expectLink
	} `json:"summary"`
	Entries []struct {
		Path   string          `json:"path"`
		Type   string          `json:"type"`
		Target string          `json:"target"`
		Kind   string          `json:"kind"`
		Rows   json.RawMessage `json:"rows"`
	} `json:"entries"`
}

type expectLink struct {
	ResourceID       string `json:"resource_id"`
	RevisionID       string `json:"revision_id"`
	SchemaVersionDir string `json:"schema_version_dir"`
	UID              string `json:"uid"`
}

func loadExpect(t *testing.T, name string) expectTree {
	t.Helper()
	var all map[string]struct {
		Tree expectTree `json:"tree"`
	}
	dec := json.NewDecoder(bytes.NewReader(testfixtures.Read(t, "disk-layout", "expect.json")))
	dec.UseNumber()
	if err := dec.Decode(&all); err != nil {
		t.Fatal(err)
	}
	v, ok := all[name]
	if !ok {
		t.Fatalf("expect.json has no variant %s", name)
	}
	return v.Tree
}

// snapshot describes every entry below root: file bytes, link targets,
// directories.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if e.IsDir() && e.Name() == store.StagingDir {
			return filepath.SkipDir // temporary files of writes in progress
		}
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] = "link:" + target
		case e.IsDir():
			m[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = "file:" + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func diffSnapshots(a, b map[string]string) []string {
	var diffs []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			diffs = append(diffs, "only before: "+k)
		} else if v != w {
			diffs = append(diffs, "changed: "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			diffs = append(diffs, "only after: "+k)
		}
	}
	sort.Strings(diffs)
	return diffs
}

// TestFixtureTrees replays each disk-layout archive into a fresh Disk and
// compares the result with the tree SpecStar's own stores wrote.
func TestFixtureTrees(t *testing.T) {
	for _, v := range variants {
		for _, symlinks := range []bool{false, true} {
			name := v.name + "/uid-file"
			if symlinks {
				name = v.name + "/symlink"
			}
			t.Run(name, func(t *testing.T) {
				opts := v.opts
				opts.SymlinkIndex = symlinks
				root := t.TempDir()
				d := openDisk(t, root, opts)
				recs := readArchive(t, v.name)
				for i, out := range applyAll(t, d, recs) {
					if out != store.Written && out != store.Unchanged {
						t.Errorf("record %d: outcome %v", i, out)
					}
				}
				compareWithReference(t, v, root, recs, symlinks)
			})
		}
	}
}

func compareWithReference(t *testing.T, v variant, root string, recs []record, symlinks bool) {
	ref := testfixtures.Path(t, "disk-layout", v.name)
	exp := loadExpect(t, v.name)

	metas := map[string]bool{}   // model/resource_id
	uids := map[string]bool{}    // model/uid
	slots := map[string]string{} // model/data/resource/rid/rev/p_sv -> uid
	blobs := map[string]bool{}   // blob file name
	for _, r := range recs {
		switch {
		case r.Meta != nil:
			metas[r.Model+"/"+r.Meta.ResourceID] = true
		case r.Rev != nil:
			in := r.Rev.Info
			uids[r.Model+"/"+in.UID] = true
			slots[filepath.Join(r.Model, "data", "resource", in.ResourceID, in.RevisionID, store.SchemaDir(in.SchemaVersion))] = in.UID
		default:
			blobs[store.BlobName(r.Blob.FileID)] = true
		}
	}
	// What the reference tree holds that a replay cannot reproduce.
	leftoverUIDs := map[string]bool{}
	leftoverResources := map[string]bool{}
	severalUIDs := map[string]bool{}
	for model, s := range exp.Summary {
		for _, u := range s.OrphanStoreUIDs {
			leftoverUIDs[model+"/"+u] = true
		}
		for _, rid := range s.ResourceDirsWithoutMeta {
			leftoverResources[model+"/"+rid] = true
		}
		for _, u := range s.UIDsReferencedBySeveral {
			severalUIDs[model+"/"+u] = true
		}
		for _, l := range s.Links {
			if leftoverResources[model+"/"+l.ResourceID] {
				leftoverUIDs[model+"/"+l.UID] = true
			}
		}
	}

	// Every file of the reference tree: byte-identical in ours, unless it
	// is an upstream leftover, which ours must not have.
	compared, missingStore := 0, map[string]bool{}
	err := filepath.WalkDir(ref, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			return err
		}
		rel, _ := filepath.Rel(ref, p)
		parts := strings.Split(rel, string(filepath.Separator))
		ours := filepath.Join(root, rel)
		switch {
		case len(parts) == 2 && parts[0] == store.BlobsDir:
			if !blobs[parts[1]] {
				t.Errorf("reference blob %s is not in the archive", rel)
				return nil
			}
		case len(parts) == 3 && parts[1] == "meta" && strings.HasSuffix(parts[2], store.MetaSuffix):
			if !metas[parts[0]+"/"+strings.TrimSuffix(parts[2], store.MetaSuffix)] {
				t.Errorf("reference meta %s is not in the archive", rel)
				return nil
			}
		case len(parts) == 2 && parts[1] == "meta.db":
			return nil // compared row by row below
		case len(parts) == 6 && parts[1] == "data" && parts[2] == "resource":
			// A symlink flattened into a file by the copy of the
			// fixtures: compared with the links below.
			return nil
		case len(parts) == 5 && parts[1] == "data" && parts[2] == "store" && (parts[4] == "data" || parts[4] == "info"):
			key := parts[0] + "/" + parts[3]
			if !uids[key] {
				if !leftoverUIDs[key] {
					t.Errorf("reference store entry %s is neither in the archive nor an upstream leftover", rel)
				}
				missingStore[key] = true
				if _, err := os.Lstat(ours); !os.IsNotExist(err) {
					t.Errorf("%s: leftover written by the replay", rel)
				}
				return nil
			}
		default:
			t.Errorf("unexpected reference file %s", rel)
			return nil
		}
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(ours)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the reference:\n got %q\nwant %q", rel, got, want)
		}
		compared++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missingStore) != v.missingStore {
		t.Errorf("%d reference store dirs not reproduced, want %d: %v", len(missingStore), v.missingStore, missingStore)
	}
	if compared == 0 {
		t.Fatal("no file compared")
	}

	// Every index link of the reference resolves to the same uid in ours,
	// in the form asked for.
	targets := map[string]string{}
	for _, e := range exp.Entries {
		if e.Type == "symlink" {
			targets[e.Path] = e.Target
		}
	}
	missingLinks := 0
	for model, s := range exp.Summary {
		for rel, l := range s.Links {
			wantSlot := filepath.Join(model, "data", "resource", l.ResourceID, l.RevisionID, l.SchemaVersionDir)
			if filepath.FromSlash(rel) != wantSlot {
				t.Errorf("link %s: summary fields give %s", rel, wantSlot)
			}
			st, err := readSlot(filepath.Join(root, rel))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := slots[wantSlot]; !ok {
				if !leftoverResources[model+"/"+l.ResourceID] && !severalUIDs[model+"/"+l.UID] {
					t.Errorf("reference link %s is neither in the archive nor an upstream leftover", rel)
				}
				if st.form != slotNone {
					t.Errorf("%s: leftover link written by the replay", rel)
				}
				missingLinks++
				continue
			}
			if st.uid != l.UID {
				t.Errorf("%s: uid %q, reference %q", rel, st.uid, l.UID)
			}
			if symlinks {
				got, _ := os.Readlink(filepath.Join(root, rel))
				if st.form != slotLink || got != targets[filepath.ToSlash(rel)] {
					t.Errorf("%s: symlink %q, reference %q", rel, got, targets[rel])
				}
			} else {
				b, err := os.ReadFile(filepath.Join(root, rel, "uid"))
				if err != nil || string(b) != l.UID {
					t.Errorf("%s/uid: %q, %v; want exactly %q", rel, b, err, l.UID)
				}
			}
		}
	}
	if missingLinks != v.missingLinks {
		t.Errorf("%d reference links not reproduced, want %d", missingLinks, v.missingLinks)
	}

	// Nothing in ours that the reference lacks (besides the uid files of
	// the index, which the reference has as symlinks), and no temporary
	// file left.
	for rel, kind := range snapshot(t, root) {
		if strings.Contains(rel, store.TmpPrefix) {
			t.Errorf("temporary file left: %s", rel)
		}
		if kind == "dir" || rel == "." {
			continue
		}
		if filepath.Base(rel) == "uid" {
			if _, ok := slots[filepath.Dir(rel)]; !ok {
				t.Errorf("index entry %s is not in the archive", rel)
			}
			continue
		}
		if _, err := os.Lstat(filepath.Join(ref, rel)); err != nil {
			t.Errorf("%s: written, but the reference tree has no such entry", rel)
		}
	}

	if v.opts.SQLiteMeta {
		compareSQLite(t, root, exp, recs)
	}
}

type sqliteRow struct {
	ResourceID    string      `json:"resource_id"`
	DataHex       string      `json:"data_hex"`
	CreatedTime   json.Number `json:"created_time"`
	UpdatedTime   json.Number `json:"updated_time"`
	CreatedBy     string      `json:"created_by"`
	UpdatedBy     string      `json:"updated_by"`
	IsDeleted     int64       `json:"is_deleted"`
	SchemaVersion *string     `json:"schema_version"`
	IndexedData   *string     `json:"indexed_data"`
}

func openRO(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlitemeta.URI(path, url.Values{"mode": {"ro"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func compareSQLite(t *testing.T, root string, exp expectTree, recs []record) {
	var fix struct {
		SchemaSQL []string    `json:"schema_sql"`
		Rows      []sqliteRow `json:"rows"`
	}
	model := ""
	for _, e := range exp.Entries {
		if e.Kind == "sqlite" {
			dec := json.NewDecoder(bytes.NewReader(e.Rows))
			dec.UseNumber()
			if err := dec.Decode(&fix); err != nil {
				t.Fatal(err)
			}
			model = strings.Split(e.Path, "/")[0]
		}
	}
	if len(fix.Rows) == 0 {
		t.Fatal("no sqlite rows in expect.json")
	}
	db := openRO(t, filepath.Join(root, model, "meta.db"))

	// Schema: SpecStar's statements verbatim, plus the contract's rev_*
	// columns and indexes added the way SpecStar adds them.
	var schema []string
	rows, err := db.Query(`SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY sql`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		schema = append(schema, s)
	}
	rows.Close()
	var want []string
	for _, s := range fix.SchemaSQL {
		if strings.HasPrefix(s, "CREATE TABLE") {
			s = strings.TrimSuffix(s, ")") + ", rev_status TEXT, rev_created_by TEXT, rev_updated_by TEXT, rev_created_time REAL, rev_updated_time REAL)"
		}
		want = append(want, s)
	}
	for _, c := range []string{"rev_created_by", "rev_created_time", "rev_status", "rev_updated_by", "rev_updated_time"} {
		want = append(want, "CREATE INDEX idx_"+c+" ON resource_meta("+c+")\n        ")
	}
	sort.Strings(want)
	if strings.Join(schema, "\n--\n") != strings.Join(want, "\n--\n") {
		t.Errorf("schema:\n%q\nwant\n%q", schema, want)
	}

	// Rows: every column as the reference wrote it. indexed_data is
	// json.dumps of the dict in its insertion order, which the archive does
	// not keep (ResourceMeta is encoded with sorted keys): ours must be
	// exactly what json.dumps prints for the same dict with keys sorted.
	metas := map[string]*events.ResourceMeta{}
	for _, r := range recs {
		if r.Meta != nil {
			metas[r.Meta.ResourceID] = r.Meta
		}
	}
	q := `SELECT resource_id, data, created_time, updated_time, created_by, updated_by, is_deleted,
		schema_version, indexed_data, rev_status, rev_created_by, rev_updated_by, rev_created_time,
		rev_updated_time, typeof(data), typeof(created_time), typeof(updated_time), typeof(is_deleted)
		FROM resource_meta ORDER BY resource_id`
	rows, err = db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			rid, createdBy, updatedBy, tData, tCreated, tUpdated, tDeleted string
			data                                                           []byte
			created, updated                                               float64
			deleted                                                        int64
			sv, indexed, revStatus, revCB, revUB                           sql.NullString
			revCT, revUT                                                   sql.NullFloat64
		)
		if err := rows.Scan(&rid, &data, &created, &updated, &createdBy, &updatedBy, &deleted, &sv, &indexed,
			&revStatus, &revCB, &revUB, &revCT, &revUT, &tData, &tCreated, &tUpdated, &tDeleted); err != nil {
			t.Fatal(err)
		}
		if n >= len(fix.Rows) {
			t.Fatalf("more rows than the reference: %s", rid)
		}
		w := fix.Rows[n]
		n++
		check := func(col string, got, want any) {
			t.Helper()
			if got != want {
				t.Errorf("row %s %s: %v, reference %v", rid, col, got, want)
			}
		}
		check("resource_id", rid, w.ResourceID)
		check("data", hex.EncodeToString(data), w.DataHex)
		wc, _ := strconv.ParseFloat(w.CreatedTime.String(), 64)
		wu, _ := strconv.ParseFloat(w.UpdatedTime.String(), 64)
		check("created_time", created, wc)
		check("updated_time", updated, wu)
		check("created_by", createdBy, w.CreatedBy)
		check("updated_by", updatedBy, w.UpdatedBy)
		check("is_deleted", deleted, w.IsDeleted)
		check("types", tData+","+tCreated+","+tUpdated+","+tDeleted, "blob,real,real,integer")
		check("schema_version", sv.Valid, w.SchemaVersion != nil)
		if w.SchemaVersion != nil {
			check("schema_version", sv.String, *w.SchemaVersion)
		}
		check("indexed_data set", indexed.Valid, w.IndexedData != nil)
		if w.IndexedData != nil {
			ref, err := events.DecodeValue(events.JSON, []byte(*w.IndexedData))
			if err != nil {
				t.Fatal(err)
			}
			// The formatter reproduces the reference text from the same
			// dict in the same order...
			again, err := sqlitemeta.AppendPyJSON(nil, ref, 0)
			if err != nil || string(again) != *w.IndexedData {
				t.Errorf("row %s: re-dumping the reference indexed_data gives %q, %v", rid, again, err)
			}
			// ...and ours is the same dict, dumped in sorted key order.
			sorted, _ := sqlitemeta.AppendPyJSON(nil, sortMaps(ref), 0)
			check("indexed_data", indexed.String, string(sorted))
		}
		m := metas[rid]
		if m == nil {
			t.Fatalf("row %s: no meta in the archive", rid)
		}
		// The fixture's SpecStar had no rev_* columns and its metas no
		// rev_* fields: NULL.
		if m.RevStatus.Present || revStatus.Valid || revCB.Valid || revUB.Valid || revCT.Valid || revUT.Valid {
			t.Errorf("row %s: rev_* columns %v %v %v %v %v", rid, revStatus, revCB, revUB, revCT, revUT)
		}
	}
	if n != len(fix.Rows) {
		t.Errorf("%d rows, reference has %d", n, len(fix.Rows))
	}
}

// sortMaps returns v with every Map's keys in sorted order.
func sortMaps(v any) any {
	switch x := v.(type) {
	case events.Map:
		m := make(events.Map, len(x))
		for i, it := range x {
			m[i] = events.MapItem{Key: it.Key, Value: sortMaps(it.Value)}
		}
		sort.SliceStable(m, func(i, j int) bool { return fmt.Sprint(m[i].Key) < fmt.Sprint(m[j].Key) })
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = sortMaps(e)
		}
		return l
	}
	return v
}

// TestApplyTwice replays each archive twice: the second pass writes
// nothing and says so.
func TestApplyTwice(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			root := t.TempDir()
			d := openDisk(t, root, v.opts)
			recs := readArchive(t, v.name)
			applyAll(t, d, recs)
			before := snapshot(t, root)
			for i, out := range applyAll(t, d, recs) {
				if out != store.Unchanged {
					t.Errorf("second pass, record %d: %v", i, out)
				}
			}
			if diffs := diffSnapshots(before, snapshot(t, root)); len(diffs) > 0 {
				t.Errorf("second pass changed the tree: %v", diffs)
			}
			// A new Disk on the same root (a restarted replicator) agrees.
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			d2 := openDisk(t, root, v.opts)
			for i, out := range applyAll(t, d2, recs) {
				if out != store.Unchanged {
					t.Errorf("after reopening, record %d: %v", i, out)
				}
			}
			if diffs := diffSnapshots(before, snapshot(t, root)); len(diffs) > 0 {
				t.Errorf("replay after reopening changed the tree: %v", diffs)
			}
		})
	}
}

// copyTree copies a directory tree, keeping symlinks as symlinks.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case e.IsDir():
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestApplyOntoReferenceTree replays each archive onto a copy of the tree
// SpecStar itself wrote (symlinked index): everything is already there, so
// nothing changes (but for meta.db, which gains the contract's rev_*
// columns, as SpecStar's own newer versions do to it).
func TestApplyOntoReferenceTree(t *testing.T) {
	for _, v := range variants {
		for _, symlinks := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/symlink=%v", v.name, symlinks), func(t *testing.T) {
				root := t.TempDir()
				copyTree(t, testfixtures.Path(t, "disk-layout", v.name), root)
				before := snapshot(t, root)
				opts := v.opts
				opts.SymlinkIndex = symlinks
				d := openDisk(t, root, opts)
				for i, out := range applyAll(t, d, readArchive(t, v.name)) {
					if out != store.Unchanged {
						t.Errorf("record %d: %v", i, out)
					}
				}
				diffs := diffSnapshots(before, snapshot(t, root))
				if v.opts.SQLiteMeta {
					if len(diffs) == 1 && strings.HasSuffix(diffs[0], "meta.db") {
						diffs = nil
					}
				}
				if len(diffs) > 0 {
					t.Errorf("replay onto the reference tree changed it: %v", diffs)
				}
			})
		}
	}
}

// TestReadReferenceTrees reads every archive record back from the tree
// SpecStar wrote (symlinked index, its own meta.db), read-only.
func TestReadReferenceTrees(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			d := openDisk(t, testfixtures.Path(t, "disk-layout", v.name), v.opts)
			checkReadBack(t, d, readArchive(t, v.name))
		})
	}
}

// TestReadBack reads every archive record back from what a Disk wrote, in
// both index forms.
func TestReadBack(t *testing.T) {
	for _, v := range variants {
		for _, symlinks := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/symlink=%v", v.name, symlinks), func(t *testing.T) {
				opts := v.opts
				opts.SymlinkIndex = symlinks
				d := openDisk(t, t.TempDir(), opts)
				recs := readArchive(t, v.name)
				applyAll(t, d, recs)
				checkReadBack(t, d, recs)
			})
		}
	}
}

func checkReadBack(t *testing.T, d *Sink, recs []record) {
	t.Helper()
	ctx := context.Background()
	for _, r := range recs {
		switch {
		case r.Meta != nil:
			m, err := d.Meta(ctx, r.Model, r.Meta.ResourceID)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := m.Encode(events.Msgpack); !bytes.Equal(b, r.Raw) {
				t.Errorf("meta %s read back differs", r.Meta.ResourceID)
			}
		case r.Rev != nil:
			in := r.Rev.Info
			info, data, err := d.Revision(ctx, r.Model, in.ResourceID, in.RevisionID, in.SchemaVersion)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := (&events.RawResource{Info: *info, RawData: data}).Encode(events.Msgpack)
			if !bytes.Equal(got, r.Raw) {
				t.Errorf("revision %s read back differs", in.UID)
			}
		default:
			b := r.Blob
			bin, rc, err := d.OpenBlob(ctx, b.FileID)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			wantCT := events.Opt[string]{}
			if b.ContentType != "" {
				wantCT = events.Some(b.ContentType)
			}
			if bin.FileID != events.Some(b.FileID) || bin.Size != events.Some(b.Size) || bin.ContentType != wantCT || bin.Data.Present {
				t.Errorf("blob %s: read back %+v", b.FileID, bin)
			}
			if !bytes.Equal(data, b.BlobData) {
				t.Errorf("blob %s: data differs", b.FileID)
			}
		}
	}
	// Absent things wrap fs.ErrNotExist.
	if _, err := d.Meta(ctx, "issue", "no-such-resource"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent meta: %v", err)
	}
	if _, _, err := d.Revision(ctx, "issue", "no-such-resource", "no-such-resource:1", events.Null[string]()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent revision: %v", err)
	}
	if _, _, err := d.OpenBlob(ctx, "00000000000000000000000000000000"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent blob: %v", err)
	}
}
