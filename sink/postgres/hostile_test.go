package postgres

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"context"
	"strings"
	"testing"
	"time"

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
