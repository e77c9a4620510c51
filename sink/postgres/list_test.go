package postgres

import (
	"context"
	"iter"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"

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

// TestPostgresListing: meta tables are listed as models in byte order (not
// the resource tables, not a table of the same name pattern without the
// meta columns), their ids in byte order across pages, and a missing
// table as empty.
func TestPostgresListing(t *testing.T) {
	ctx := context.Background()
	conn := pgAdmin(t)
	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix, Revisions: true})
	for _, model := range []string{"zeta", "issue", "a-b"} {
		for _, id := range listIDs {
			if _, err := p.ApplyMeta(ctx, model, sinktestutil.Meta(t, id, "2024-05-01T00:00:00Z", 1, "alice")); err != nil {
				t.Fatal(err)
			}
		}
	}
	pgFlush(t, p)
	if _, err := conn.Exec(ctx, "CREATE TABLE "+pgx.Identifier{prefix + "junk_meta"}.Sanitize()+" (x int)"); err != nil {
		t.Fatal(err)
	}
	models, err := p.Models(ctx)
	if want := []string{"a-b", "issue", "zeta"}; err != nil || !reflect.DeepEqual(models, want) {
		t.Fatalf("models %q, %v; want %q", models, err, want)
	}
	for _, model := range models {
		if got := collectIDs(t, p.ResourceIDs(ctx, model)); !reflect.DeepEqual(got, listSorted) {
			t.Errorf("model %s: ids %q, want %q", model, got, listSorted)
		}
	}
	if got := collectIDs(t, p.ResourceIDs(ctx, "absent")); len(got) != 0 {
		t.Errorf("missing table: ids %q, want none", got)
	}

	// More than a page, and stopping early many times more often than the
	// pool has connections (a listing left open would hang the next).
	table := pgx.Identifier{prefix + "zeta_meta"}.Sanitize()
	if _, err := conn.Exec(ctx, "INSERT INTO "+table+` (resource_id, data, created_time, updated_time, created_by, updated_by, is_deleted)
		SELECT 'p' || lpad(g::text, 5, '0'), '\x00', now(), now(), 'a', 'a', false FROM generate_series(1, $1) g`, 2*store.ListPage+17); err != nil {
		t.Fatal(err)
	}
	got := collectIDs(t, p.ResourceIDs(ctx, "zeta"))
	if len(got) != len(listSorted)+2*store.ListPage+17 || got[0] != "A" || got[len(got)-1] != "日本" || got[7] != "p00001" || got[7+2*store.ListPage+16] != "p02017" {
		t.Fatalf("%d ids listed, in the wrong order or not all of them", len(got))
	}
	for i := 0; i < 10; i++ {
		for id, err := range p.ResourceIDs(ctx, "zeta") {
			if err != nil || id != "A" {
				t.Fatalf("first id %q, %v", id, err)
			}
			break
		}
	}

	shared := pgOpen(t, Options{TablePrefix: prefix, MetaTable: "metas"})
	if _, err := shared.Models(ctx); !store.IsInvalid(err) {
		t.Fatalf("a template without {model}: %v, want an invalid-template error", err)
	}
}
