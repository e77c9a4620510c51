package postgres

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// TestYearOutsidePythonRangeRefused (issue 12, item 8): the range check
// let year 10000 through (it tested y > 10000), so a meta SpecStar cannot
// read back was stored. Years 1 to 9999 are stored; others are invalid.
func TestYearOutsidePythonRangeRefused(t *testing.T) {
	ctx := context.Background()
	p := pgOpen(t, Options{TablePrefix: pgPrefix(t)})
	for _, tc := range []struct {
		year int
		ok   bool
	}{{9999, true}, {1, true}, {10000, false}, {0, false}} {
		m := sinktestutil.Meta(t, "issue:y"+strings.Repeat("x", tc.year%7), "2024-01-01T00:00:00Z", 1, "alice")
		m.UpdatedTime = events.Time{Time: time.Date(tc.year, 6, 1, 0, 0, 0, 0, time.UTC)}
		_, err := p.ApplyMeta(ctx, "issue", m)
		if tc.ok && err != nil {
			t.Errorf("year %d: %v", tc.year, err)
		}
		if !tc.ok && !store.IsInvalid(err) {
			t.Errorf("year %d: %v, want an invalid-record error", tc.year, err)
		}
	}
	pgFlush(t, p)
}

func TestIncompatibleMetaTableIsInvalid(t *testing.T) {
	ctx := context.Background()
	conn := pgAdmin(t)
	prefix := pgPrefix(t)
	p := pgOpen(t, Options{TablePrefix: prefix})
	for _, tc := range []struct{ model, column, ddl string }{
		{"broken", "data", `resource_id TEXT PRIMARY KEY, data TEXT NOT NULL, created_time TIMESTAMP NOT NULL,
			updated_time TIMESTAMP NOT NULL, created_by TEXT NOT NULL, updated_by TEXT NOT NULL, is_deleted BOOLEAN NOT NULL`},
		{"skewed", "updated_time", `resource_id TEXT PRIMARY KEY, data BYTEA NOT NULL, created_time TIMESTAMP NOT NULL,
			updated_time TEXT NOT NULL, created_by TEXT NOT NULL, updated_by TEXT NOT NULL, is_deleted BOOLEAN NOT NULL`},
	} {
		table := prefix + tc.model + "_meta"
		if _, err := conn.Exec(ctx, `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (`+tc.ddl+`)`); err != nil {
			t.Fatal(err)
		}
		_, err := p.ApplyMeta(ctx, tc.model, sinktestutil.Meta(t, tc.model+":1", "2024-05-01T00:00:00Z", 1, "a"))
		if err == nil || !store.IsInvalid(err) || !strings.Contains(err.Error(), table) || !strings.Contains(err.Error(), `"`+tc.column+`"`) {
			t.Fatalf("meta of %s (column %s retyped): want an InvalidError naming table %s and column %s, got %v",
				tc.model, tc.column, table, tc.column, err)
		}
		t.Logf("%s: %v", tc.model, err)
		// Purges of that model are refused the same way.
		if _, err := p.ApplyPurge(ctx, tc.model, tc.model+":1", sinktestutil.MustTime(t, "2024-05-02T00:00:00Z")); !store.IsInvalid(err) {
			t.Fatalf("purge of %s: want an InvalidError, got %v", tc.model, err)
		}
	}
	// Another model is not held back.
	good := sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a")
	if _, err := p.ApplyMeta(ctx, "issue", good); err != nil {
		t.Fatalf("meta of a sound model: %v", err)
	}
	pgFlush(t, p)
	got, err := p.Meta(ctx, "issue", "issue:1")
	if err != nil || got.CurrentRevisionID != good.CurrentRevisionID {
		t.Fatalf("the sound model's meta after Flush: %v, %v", got, err)
	}
}
