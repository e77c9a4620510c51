package postgres

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// pgWithout drops from a pgDump the rows of a purged resource: its meta
// row, its resource_index rows and the resource_data rows of its uids.
func pgWithout(t *testing.T, rows []string, model, rid string, uids map[string]bool) []string {
	t.Helper()
	var out []string
	for _, r := range rows {
		table, js, _ := strings.Cut(r, " ")
		var m map[string]any
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			t.Fatal(err)
		}
		switch {
		case table == model+"_meta" && m["resource_id"] == rid,
			table == "resource_index" && m["resource_id"] == rid,
			table == "resource_data" && uids[m["uid"].(string)]:
			continue
		}
		out = append(out, r)
	}
	return out
}

func TestPostgresPurge(t *testing.T) {
	ctx := context.Background()
	conn := pgAdmin(t)
	recs := pgReadArchive(t, "small.acbak")
	model, meta, uids := sinktestutil.PurgeTarget(t, recs)
	rid := meta.ResourceID
	after := events.Time{Time: meta.UpdatedTime.Instant().Add(time.Hour)}
	before := events.Time{Time: meta.UpdatedTime.Instant().Add(-time.Second)}
	var mine []record
	for _, r := range recs {
		if r.Model == model && (r.Meta != nil && r.Meta.ResourceID == rid || r.Rev != nil && r.Rev.Info.ResourceID == rid) {
			mine = append(mine, r)
		}
	}
	purge := func(p *Sink, at events.Time) {
		t.Helper()
		if out, err := p.ApplyPurge(ctx, model, rid, at); err != nil || out != store.Written {
			t.Fatalf("ApplyPurge: %v, %v; want written (queued)", out, err)
		}
	}

	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix, Revisions: true})
	pgApply(t, p, recs)
	pgFlush(t, p)
	rows0, xmins0 := pgDump(t, conn, prefix)
	want := pgWithout(t, rows0, model, rid, uids)
	if len(rows0)-len(want) < 1+2*len(uids)-1 {
		t.Fatalf("test picked a resource with too little to purge: %d of %d rows", len(rows0)-len(want), len(rows0))
	}

	t.Run("stale", func(t *testing.T) {
		purge(p, before)
		pgFlush(t, p)
		rows, xmins := pgDump(t, conn, prefix)
		if !reflect.DeepEqual(rows, rows0) || !reflect.DeepEqual(xmins, xmins0) {
			t.Fatal("a purge older than the meta changed rows")
		}
	})
	t.Run("purge", func(t *testing.T) {
		purge(p, after)
		pgFlush(t, p)
		rows, xmins := pgDump(t, conn, prefix)
		if !reflect.DeepEqual(rows, want) {
			t.Fatalf("after purge:\n got %d rows %v\nwant %d rows %v", len(rows), rows, len(want), want)
		}
		// Again: nothing left, nothing written.
		purge(p, after)
		pgFlush(t, p)
		rows2, xmins2 := pgDump(t, conn, prefix)
		if !reflect.DeepEqual(rows2, rows) || !reflect.DeepEqual(xmins2, xmins) {
			t.Fatal("a repeated purge changed rows")
		}
	})
	t.Run("purge-then-recreate", func(t *testing.T) {
		// One batch: the purge, then the resource's records again.
		purge(p, after)
		for _, r := range mine {
			var err error
			if r.Meta != nil {
				_, err = p.ApplyMeta(ctx, r.Model, r.Meta)
			} else {
				_, err = p.ApplyRevision(ctx, r.Model, r.Rev)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		pgFlush(t, p)
		if rows, _ := pgDump(t, conn, prefix); !reflect.DeepEqual(rows, rows0) {
			t.Fatal("purge then re-create in one batch did not end with the resource")
		}
	})
	t.Run("recreate-then-purge", func(t *testing.T) {
		// The resource is stored; one batch re-applies it, then purges it.
		for _, r := range mine {
			var err error
			if r.Meta != nil {
				_, err = p.ApplyMeta(ctx, r.Model, r.Meta)
			} else {
				_, err = p.ApplyRevision(ctx, r.Model, r.Rev)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		purge(p, after)
		pgFlush(t, p)
		if rows, _ := pgDump(t, conn, prefix); !reflect.DeepEqual(rows, want) {
			t.Fatal("re-create then purge in one batch did not end deleted")
		}
		// And from nothing: the purge removes what the batch queued first.
		for _, r := range mine {
			var err error
			if r.Meta != nil {
				_, err = p.ApplyMeta(ctx, r.Model, r.Meta)
			} else {
				_, err = p.ApplyRevision(ctx, r.Model, r.Rev)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		purge(p, after)
		pgFlush(t, p)
		if rows, _ := pgDump(t, conn, prefix); !reflect.DeepEqual(rows, want) {
			t.Fatal("queued records then purge wrote rows")
		}
	})
	t.Run("meta-only", func(t *testing.T) {
		prefix := pgPrefix(t)
		p := pgOpen(t, Options{TablePrefix: prefix})
		pgApply(t, p, recs)
		pgFlush(t, p)
		rows0, _ := pgDump(t, conn, prefix)
		purge(p, after)
		pgFlush(t, p)
		rows, _ := pgDump(t, conn, prefix)
		if want := pgWithout(t, rows0, model, rid, nil); !reflect.DeepEqual(rows, want) || len(want) != len(rows0)-1 {
			t.Fatalf("meta-only purge: %d rows, want %d", len(rows), len(want))
		}
	})
}

func TestPostgresPurgeInvalid(t *testing.T) {
	ctx := context.Background()
	p := pgOpen(t, Options{TablePrefix: pgPrefix(t), Revisions: true})
	at := events.Time{Time: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, tc := range []struct{ model, rid string }{
		{"", "r"}, {"bad model", "r"}, {"m", ""}, {"m", "x\x00y"}, {"m", strings.Repeat("x", 3000)},
	} {
		if _, err := p.ApplyPurge(ctx, tc.model, tc.rid, at); !store.IsInvalid(err) {
			t.Errorf("ApplyPurge(%q, %.20q) = %v, want invalid", tc.model, tc.rid, err)
		}
	}
}
