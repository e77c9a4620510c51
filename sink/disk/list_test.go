package disk

import (
	"context"
	"database/sql"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// listIDs are resource ids in shuffled order; listSorted is their byte
// order, written out by hand: "a" < "a-b" < "a.b" < "a_b" < "b", capitals
// before lowercase, and UTF-8 after ASCII ("é" is 0xc3 0xa9, "日" 0xe6),
// not the dictionary order of a locale.
var (
	listIDs    = []string{"b", "日本", "a_b", "A", "é", "a-b", "z", "a", "a.b", "e"}
	listSorted = []string{"A", "a", "a-b", "a.b", "a_b", "b", "e", "z", "é", "日本"}
)

func collectIDs(t *testing.T, seq iter.Seq2[string, error]) []string {
	t.Helper()
	var ids []string
	for id, err := range seq {
		if err != nil {
			t.Fatalf("after %d ids: %v", len(ids), err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestDiskListing: both meta stores list their models and resource ids in
// byte order, skip what is not a meta, and list a model without metas as
// empty.
func TestDiskListing(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"files", Options{SyncPerBatch: true}},
		{"sqlite", Options{SQLiteMeta: true, SyncPerBatch: true}},
		{"files msgpack", Options{Encoding: events.Msgpack, SyncPerBatch: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			root := t.TempDir()
			d := openDisk(t, root, c.opts)
			for _, model := range []string{"zeta", "issue", "a-b"} {
				for _, id := range listIDs {
					if _, err := d.ApplyMeta(ctx, model, sinktestutil.Meta(t, id, "2024-05-01T00:00:00Z", 1, "alice")); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A model with revisions but no metas, and what is not a model.
			rev := sinktestutil.Revision(t, "r1", "r1:1", "11111111-1111-4111-8111-111111111111", events.Opt[string]{}, events.Opt[string]{}, "2024-01-01T00:00:00Z", "x")
			if _, err := d.ApplyRevision(ctx, "onlyrevs", rev); err != nil {
				t.Fatal(err)
			}
			if _, err := d.ApplyBlob(ctx, "5c7401c0ec22eeeeeaf06c6480b2cd11", 1, "", strings.NewReader("x")); err != nil {
				t.Fatal(err)
			}
			if err := d.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, ".specstar-tmp", "1", "meta"), 0o755); err != nil {
				t.Fatal(err)
			}
			if !c.opts.SQLiteMeta {
				// Not metas: a temporary file, another suffix, a directory.
				meta := filepath.Join(root, "issue", "meta")
				for _, name := range []string{".tmp-0123.data", "notes.txt"} {
					if err := os.WriteFile(filepath.Join(meta, name), []byte("x"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Mkdir(filepath.Join(meta, "dir.data"), 0o755); err != nil {
					t.Fatal(err)
				}
			}

			models, err := d.Models(ctx)
			if want := []string{"a-b", "issue", "zeta"}; err != nil || !reflect.DeepEqual(models, want) {
				t.Fatalf("models %q, %v; want %q", models, err, want)
			}
			for _, model := range models {
				if got := collectIDs(t, d.ResourceIDs(ctx, model)); !reflect.DeepEqual(got, listSorted) {
					t.Errorf("model %s: ids %q, want %q", model, got, listSorted)
				}
			}
			for _, model := range []string{"onlyrevs", "absent"} {
				if got := collectIDs(t, d.ResourceIDs(ctx, model)); len(got) != 0 {
					t.Errorf("model %s: ids %q, want none", model, got)
				}
			}
			// Stopping early is not an error.
			for id, err := range d.ResourceIDs(ctx, "issue") {
				if err != nil || id != "A" {
					t.Fatalf("first id %q, %v", id, err)
				}
				break
			}
			for _, err := range d.ResourceIDs(ctx, "../x") {
				if !store.IsInvalid(err) {
					t.Fatalf("model ../x: %v, want an invalid model", err)
				}
			}
		})
	}
}

// TestDiskListingPages: a SQLite meta store larger than a page lists every
// id once, in order.
func TestDiskListingPages(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := openDisk(t, root, Options{SQLiteMeta: true})
	if _, err := d.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, "r", "2024-05-01T00:00:00Z", 1, "alice")); err != nil {
		t.Fatal(err)
	}
	n := 2*store.ListPage + 17
	db, err := sql.Open("sqlite", filepath.Join(root, "issue", "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"r"}
	for i := 0; i < n-1; i++ {
		id := fmt.Sprintf("r%05d", i)
		want = append(want, id)
		if _, err := tx.Exec(`INSERT INTO resource_meta (resource_id, data, created_time, updated_time, created_by, updated_by, is_deleted)
			VALUES (?, x'00', 0, 0, 'a', 'a', 0)`, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := collectIDs(t, d.ResourceIDs(ctx, "issue")); !reflect.DeepEqual(got, want) {
		t.Fatalf("%d ids listed, want %d in order (first %q, last %q)", len(got), len(want), got[:min(3, len(got))], got[max(0, len(got)-3):])
	}
}
