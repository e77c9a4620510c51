package disk

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// purgedPaths says whether a snapshot path belongs to the purged resource.
func purgedPaths(model, rid string, uids map[string]bool) func(string) bool {
	metaFile := filepath.Join(model, "meta", rid+store.MetaSuffix)
	resDir := filepath.Join(model, "data", "resource", rid)
	storeDir := filepath.Join(model, "data", "store")
	return func(p string) bool {
		if p == metaFile || p == resDir || strings.HasPrefix(p, resDir+"/") {
			return true
		}
		if rel, ok := strings.CutPrefix(p, storeDir+"/"); ok {
			uid, _, _ := strings.Cut(rel, "/")
			return uids[uid]
		}
		return false
	}
}

// sqliteRows dumps a model's meta.db rows (resource_id -> data).
func sqliteRows(t *testing.T, root, model string) map[string]string {
	t.Helper()
	db := openRO(t, filepath.Join(root, model, "meta.db"))
	rows, err := db.Query(`SELECT resource_id, data FROM resource_meta`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var (
			id   string
			data []byte
		)
		if err := rows.Scan(&id, &data); err != nil {
			t.Fatal(err)
		}
		m[id] = string(data)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// withoutMetaDB drops the SQLite files from a snapshot (their bytes change
// with any write; their rows are compared instead).
func withoutMetaDB(s map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range s {
		if b := filepath.Base(k); b == "meta.db" || strings.HasPrefix(b, "meta.db-") {
			continue
		}
		out[k] = v
	}
	return out
}

func TestDiskPurge(t *testing.T) {
	ctx := context.Background()
	recs := sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, "small.acbak"))
	model, meta, uids := sinktestutil.PurgeTarget(t, recs)
	rid := meta.ResourceID
	after := events.Time{Time: meta.UpdatedTime.Instant().Add(time.Hour)}
	before := events.Time{Time: meta.UpdatedTime.Instant().Add(-time.Second)}
	gone := purgedPaths(model, rid, uids)
	for _, mode := range metaModes {
		for _, symlinks := range []bool{false, true} {
			name := mode.name
			if symlinks {
				name += "-symlinks"
			}
			t.Run(name, func(t *testing.T) {
				opts := mode.opts
				opts.SymlinkIndex = symlinks
				root := t.TempDir()
				d := openDisk(t, root, opts)
				applyAll(t, d, recs)
				snap0 := withoutMetaDB(snapshot(t, root))
				var rows0 map[string]string
				if opts.SQLiteMeta {
					rows0 = sqliteRows(t, root, model)
				}

				// Purged before the last update: the resource was re-created.
				if out, err := d.ApplyPurge(ctx, model, rid, before); err != nil || out != store.Stale {
					t.Fatalf("early purge: %v, %v; want stale", out, err)
				}
				if err := d.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if diff := diffSnapshots(snap0, withoutMetaDB(snapshot(t, root))); len(diff) != 0 {
					t.Fatalf("stale purge changed the tree: %v", diff)
				}

				if out, err := d.ApplyPurge(ctx, model, rid, after); err != nil || out != store.Written {
					t.Fatalf("purge: %v, %v; want written", out, err)
				}
				if err := d.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				snap1 := withoutMetaDB(snapshot(t, root))
				want := map[string]string{}
				removed := 0
				for k, v := range snap0 {
					if gone(k) {
						removed++
						continue
					}
					want[k] = v
				}
				if removed < 1+len(uids) {
					t.Fatalf("test picked a resource with nothing to purge (%d paths)", removed)
				}
				if diff := diffSnapshots(want, snap1); len(diff) != 0 {
					t.Fatalf("after purge, tree differs from the original minus the resource: %v", diff)
				}
				if opts.SQLiteMeta {
					rows1 := sqliteRows(t, root, model)
					if _, ok := rows1[rid]; ok {
						t.Fatal("meta row still there")
					}
					delete(rows0, rid)
					if len(rows0) != len(rows1) {
						t.Fatalf("rows: %d, want %d", len(rows1), len(rows0))
					}
					for k, v := range rows0 {
						if rows1[k] != v {
							t.Fatalf("row %q changed", k)
						}
					}
				}
				if _, err := d.Meta(ctx, model, rid); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("Meta after purge: %v", err)
				}
				for _, r := range recs {
					if r.Rev != nil && r.Model == model && r.Rev.Info.ResourceID == rid {
						if _, _, err := d.Revision(ctx, model, rid, r.Rev.Info.RevisionID, r.Rev.Info.SchemaVersion); !errors.Is(err, fs.ErrNotExist) {
							t.Fatalf("Revision after purge: %v", err)
						}
					}
				}

				// Again: nothing left to do.
				if out, err := d.ApplyPurge(ctx, model, rid, after); err != nil || out != store.Unchanged {
					t.Fatalf("second purge: %v, %v; want unchanged", out, err)
				}
				if diff := diffSnapshots(snap1, withoutMetaDB(snapshot(t, root))); len(diff) != 0 {
					t.Fatalf("second purge changed the tree: %v", diff)
				}
				// A resource that never existed.
				if out, err := d.ApplyPurge(ctx, model, "no-such-resource", after); err != nil || out != store.Unchanged {
					t.Fatalf("absent resource: %v, %v; want unchanged", out, err)
				}
			})
		}
	}
}

// TestDiskPurgeResume: a purge that stopped half-way (after the meta, after
// the index entries) is completed by the next one.
func TestDiskPurgeResume(t *testing.T) {
	ctx := context.Background()
	recs := sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, "small.acbak"))
	model, meta, uids := sinktestutil.PurgeTarget(t, recs)
	rid := meta.ResourceID
	at := events.Time{Time: meta.UpdatedTime.Instant().Add(time.Hour)}
	gone := purgedPaths(model, rid, uids)
	for _, tc := range []struct {
		name  string
		crash func(d *Sink) error
	}{
		{"after-meta", func(d *Sink) error {
			_, err := d.purgeMeta(ctx, model, rid, at)
			return err
		}},
		{"after-index", func(d *Sink) error {
			if _, err := d.purgeMeta(ctx, model, rid, at); err != nil {
				return err
			}
			dataDir := filepath.Join(d.root, model, "data")
			_, err := d.purgeIndex(dataDir, graveyardPath(dataDir, rid), rid, at)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			d := openDisk(t, root, Options{})
			applyAll(t, d, recs)
			snap0 := snapshot(t, root)
			if err := tc.crash(d); err != nil {
				t.Fatal(err)
			}
			// Readers never see a meta whose revisions are gone.
			if _, err := d.Meta(ctx, model, rid); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("meta still readable: %v", err)
			}
			if out, err := d.ApplyPurge(ctx, model, rid, at); err != nil || out != store.Written {
				t.Fatalf("resumed purge: %v, %v; want written", out, err)
			}
			if err := d.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for k, v := range snap0 {
				if !gone(k) {
					want[k] = v
				}
			}
			if diff := diffSnapshots(want, snapshot(t, root)); len(diff) != 0 {
				t.Fatalf("after resumed purge: %v", diff)
			}
		})
	}
}

// TestDiskPurgeKeepsRecreation: with no meta stored, revisions updated
// after the purge belong to a re-creation and stay; older ones go.
func TestDiskPurgeKeepsRecreation(t *testing.T) {
	ctx := context.Background()
	d := openDisk(t, t.TempDir(), Options{})
	none := events.Opt[string]{}
	oldRev := sinktestutil.Revision(t, "r1", "r1:1", "11111111-1111-4111-8111-111111111111", none, none, "2024-01-01T00:00:00Z", "old")
	newRev := sinktestutil.Revision(t, "r1", "r1:2", "22222222-2222-4222-8222-222222222222", none, none, "2024-03-01T00:00:00Z", "new")
	for _, r := range []*events.RawResource{oldRev, newRev} {
		if _, err := d.ApplyRevision(ctx, "m", r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.ApplyMeta(ctx, "m", sinktestutil.Meta(t, "r1", "2024-01-01T00:00:00Z", 1, "alice")); err != nil {
		t.Fatal(err)
	}
	if out, err := d.ApplyPurge(ctx, "m", "r1", sinktestutil.MustTime(t, "2024-02-01T00:00:00")); err != nil || out != store.Written {
		t.Fatalf("purge: %v, %v", out, err)
	}
	if _, _, err := d.Revision(ctx, "m", "r1", "r1:1", none); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old revision: %v", err)
	}
	if _, data, err := d.Revision(ctx, "m", "r1", "r1:2", none); err != nil || string(data) != "new" {
		t.Fatalf("re-created revision: %q, %v", data, err)
	}
	if _, err := d.Meta(ctx, "m", "r1"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("meta: %v", err)
	}
}

func TestDiskPurgeInvalid(t *testing.T) {
	ctx := context.Background()
	at := sinktestutil.MustTime(t, "2024-02-01T00:00:00Z")
	for _, mode := range metaModes {
		d := openDisk(t, t.TempDir(), mode.opts)
		for _, tc := range []struct{ model, rid string }{
			{"", "r"}, {"..", "r"}, {"a/b", "r"}, {store.BlobsDir, "r"},
			{"m", ""}, {"m", ".."}, {"m", "a/b"}, {"m", "/abs"}, {"m", "x\x00y"}, {"m", strings.Repeat("x", 251)},
		} {
			if _, err := d.ApplyPurge(ctx, tc.model, tc.rid, at); !store.IsInvalid(err) {
				t.Errorf("%s: ApplyPurge(%q, %q) = %v, want invalid", mode.name, tc.model, tc.rid, err)
			}
		}
	}
}
