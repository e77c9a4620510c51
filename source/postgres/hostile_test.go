package postgres

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/events"
)

// TestPurgeCheckFindsDeletedRows (issue 12, item 23): Poll could not see
// a deleted meta row. Its purge check now compares the table's ids with
// the previous check's list and the ids emitted since, across page
// boundaries of the id cursor: every id gone, and only those, becomes one
// PurgeRecord, in byte order, stamped no earlier than the deleted rows
// were written; the first check only takes the list.
func TestPurgeCheckFindsDeletedRows(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t)
	if err := w.CreateModel(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{w.MetaTable("m")}.Sanitize()
	conn, err := pgx.Connect(ctx, pgTestDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	n := 2*purgeIDPage + 500
	_, err = conn.Exec(ctx, `INSERT INTO `+table+` (resource_id, data, created_time, updated_time, created_by, updated_by, is_deleted)
		SELECT 'm:' || lpad(i::text, 5, '0'), '\x00', now(), now(), 'u', 'u', false FROM generate_series(1, $1) i`, n)
	if err != nil {
		t.Fatal(err)
	}
	src := openSource(t, prefixOf(w), Options{})
	pc, err := newPurgeCheck(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.close()
	var purged []string
	var stamps []time.Time
	emit := func(model string, rec events.Record, _ Cursor) error {
		pr, ok := rec.(*events.PurgeRecord)
		if !ok || model != "m" {
			return fmt.Errorf("emitted a %s of %q", rec.Tag(), model)
		}
		purged, stamps = append(purged, pr.ResourceID), append(stamps, pr.PurgedTime.Time)
		return nil
	}
	cur := Cursor{Models: map[string]*ModelCursor{}}
	check := func(want ...string) {
		t.Helper()
		purged = nil
		got, err := src.runPurgeCheck(ctx, pc, &cur, emit)
		if err != nil {
			t.Fatal(err)
		}
		if got != len(purged) || !slices.Equal(purged, want) {
			t.Fatalf("purge check emitted %d purges %v, want %v", got, purged, want)
		}
	}
	check() // the first check only takes the list
	before := time.Now().Add(-time.Minute)
	// Deleted: the first id, both sides of each page boundary, the last.
	gone := []string{"m:00001", "m:01000", "m:01001", "m:02000", "m:02001", fmt.Sprintf("m:%05d", n)}
	if _, err := conn.Exec(ctx, `DELETE FROM `+table+` WHERE resource_id = ANY($1)`, gone); err != nil {
		t.Fatal(err)
	}
	// Emitted since the last check and deleted before this one: never in
	// a list, still purged; one emitted and still there is not.
	pc.saw("m", "m:00000-new")
	pc.saw("m", "m:00500")
	want := slices.Sorted(slices.Values(append(slices.Clone(gone), "m:00000-new")))
	check(want...)
	for _, at := range stamps {
		if at.Before(before) {
			t.Errorf("purge stamped %v, before the rows were deleted", at)
		}
	}
	check() // nothing new
	if pc.due() {
		t.Error("a check just ran, yet it is due again")
	}
}
