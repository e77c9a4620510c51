package doctor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/internal/redact"
	"github.com/specstar/replicator/source/postgres"
)

// pgFacts are what a Postgres source showed about logical replication.
type pgFacts struct {
	walLevel    string
	replication bool // the role has REPLICATION (or is a superuser)
	role, db    string
	keepMB      int64 // max_slot_wal_keep_size in MB; -1 unlimited
	slot        *slotFacts
	slotName    string
}

// slotFacts are a replication slot's row of pg_replication_slots.
type slotFacts struct {
	database  string
	active    bool
	pid       int64
	walStatus string
	retained  int64 // bytes of WAL kept for it
}

// checkPostgres checks a Postgres source for `writer tail --mode
// logical`: wal_level, the REPLICATION attribute, the slot and the clock.
func checkPostgres(ctx context.Context, o Options) []Result {
	const check = "postgres source"
	shown := redact.URL(o.Source)
	conn, err := pgx.Connect(ctx, o.Source)
	if err != nil {
		return []Result{fail(check, "check the DSN, that the server runs and that pg_hba.conf admits this host and role", "%s: %v", shown, redact.Error(err, o.Source))}
	}
	defer conn.Close(context.Background())
	var f pgFacts
	before := o.Now()
	var serverNow time.Time
	err = conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_user::text, current_database()::text,
		(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user),
		(SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'), clock_timestamp()`).
		Scan(&f.walLevel, &f.role, &f.db, &f.replication, &f.keepMB, &serverNow)
	after := o.Now()
	if err != nil {
		return []Result{fail(check, "", "%s: settings: %v", shown, err)}
	}
	f.slotName = o.Slot
	if f.slotName == "" {
		f.slotName = postgres.DefaultSlotFor(f.db)
		if s, err := slotOf(ctx, conn, "specstar_replicator"); err == nil && s != nil && s.database == f.db {
			f.slotName = "specstar_replicator" // an earlier version's default, kept where it exists
		}
	}
	if f.slot, err = slotOf(ctx, conn, f.slotName); err != nil {
		return []Result{fail(check, "", "%s: %v", shown, err)}
	}
	out := []Result{pass(check, "%s: database %s as %s", shown, f.db, f.role)}
	out = append(out, judgeWalLevel(f), judgeReplication(f), judgeSlot(f))
	return append(out, judgeClock("clock postgres", serverNow, before, after))
}

// slotOf reads the slot named name (nil when there is none).
func slotOf(ctx context.Context, conn *pgx.Conn, name string) (*slotFacts, error) {
	var s slotFacts
	var db *string
	var pid *int64
	var walStatus *string
	var retained *int64
	err := conn.QueryRow(ctx, `SELECT database::text, active, active_pid::bigint, wal_status,
		(pg_current_wal_lsn() - restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&db, &s.active, &pid, &walStatus, &retained)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("slot %s: %w", name, err)
	}
	if db != nil {
		s.database = *db
	}
	if pid != nil {
		s.pid = *pid
	}
	if walStatus != nil {
		s.walStatus = *walStatus
	}
	if retained != nil {
		s.retained = *retained
	}
	return &s, nil
}

// judgeWalLevel: logical decoding needs wal_level = logical.
func judgeWalLevel(f pgFacts) Result {
	const fix = "ALTER SYSTEM SET wal_level = logical; then restart Postgres"
	switch {
	case f.walLevel == "logical":
		return pass("wal_level", "logical")
	case f.slot != nil:
		return fail("wal_level", fix, "%s, but slot %s exists: its tail cannot decode changes", f.walLevel, f.slotName)
	}
	return warn("wal_level", fix+" (writer tail --mode poll does without)", "%s: writer tail --mode logical needs logical", f.walLevel)
}

// judgeReplication: a logical tail's role needs the REPLICATION attribute.
func judgeReplication(f pgFacts) Result {
	if f.replication {
		return pass("replication role", "%s may replicate", f.role)
	}
	return warn("replication role", fmt.Sprintf("ALTER ROLE %s REPLICATION (writer tail --mode poll does without)", f.role), "%s lacks the REPLICATION attribute: writer tail --mode logical cannot create or follow a slot", f.role)
}

// judgeSlot: the tail's slot is this database's, followed, and keeps the
// WAL it needs without filling the server's disk.
func judgeSlot(f pgFacts) Result {
	check := "slot " + f.slotName
	s := f.slot
	limit := "unlimited (max_slot_wal_keep_size = -1: WAL is kept until the disk fills)"
	if f.keepMB >= 0 {
		limit = progress.Bytes(f.keepMB << 20)
	}
	switch {
	case s == nil:
		return pass(check, "none yet (writer tail --mode logical creates it; poll mode needs none)")
	case s.database != f.db:
		return fail(check, "give this database's tail a slot of its own: writer tail --slot NAME (the default is specstar_replicator_<database>)", "belongs to database %q, not %q: following it would take the other deployment's changes", s.database, f.db)
	case s.walStatus == "lost":
		return fail(check, fmt.Sprintf("the tail must start over: SELECT pg_drop_replication_slot('%s'); restart writer tail (it snapshots again), then replicator reconcile", f.slotName), "lost WAL it needed (wal_status lost): changes since are gone for the tail")
	case s.walStatus == "unreserved":
		return fail(check, "start writer tail now, or raise max_slot_wal_keep_size", "retains %s, past max_slot_wal_keep_size (%s): the next checkpoint removes WAL it needs", progress.Bytes(s.retained), limit)
	case !s.active:
		return warn(check, "start writer tail --mode logical; drop the slot if its tail is gone for good", "no tail follows it: it retains %s of WAL, and more with every write (limit %s)", progress.Bytes(s.retained), limit)
	case f.keepMB > 0 && s.retained > (f.keepMB<<20)*8/10:
		return warn(check, "find why the tail lags (writer tail's logs), or raise max_slot_wal_keep_size", "retains %s of the %s max_slot_wal_keep_size allows", progress.Bytes(s.retained), limit)
	}
	return pass(check, "followed (pid %d), retains %s of WAL (limit %s)", s.pid, progress.Bytes(s.retained), limit)
}
