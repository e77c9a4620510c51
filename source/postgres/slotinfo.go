package postgres

// The slot seen from outside the tail: dropping it, its lag, and whether
// the server and role allow logical replication at all.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DropLogical drops the slot and the publication if they exist; it exists
// for slot hygiene: an abandoned slot keeps WAL forever. It fails while a
// stream is using the slot, never drops another database's, and returns
// the slot's name.
func DropLogical(ctx context.Context, dsn string, o LogicalOptions) (string, error) {
	o, err := o.withDefaults()
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("source: logical drop: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if o, err = resolveSlot(ctx, conn, o); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, o.Slot); err != nil {
		return "", fmt.Errorf("source: logical drop: slot %s: %w", o.Slot, err)
	}
	if _, err := conn.Exec(ctx, `DROP PUBLICATION IF EXISTS `+ident(o.Publication)); err != nil {
		return "", fmt.Errorf("source: logical drop: publication %s: %w", o.Publication, err)
	}
	return o.Slot, nil
}

// SlotLag is the WAL the slot retains beyond what was confirmed, in bytes
// (pg_current_wal_lsn() - confirmed_flush_lsn); it exists for a metric
// and an alert on a stalled replicator.
func SlotLag(ctx context.Context, dsn string, o LogicalOptions) (int64, error) {
	o, err := o.withDefaults()
	if err != nil {
		return 0, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, fmt.Errorf("source: slot lag: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if o, err = resolveSlot(ctx, conn, o); err != nil {
		return 0, err
	}
	var lag int64
	err = conn.QueryRow(ctx, `SELECT greatest(pg_current_wal_lsn() - confirmed_flush_lsn, 0)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, o.Slot).Scan(&lag)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("source: slot lag: no slot %s", o.Slot)
	}
	if err != nil {
		return 0, fmt.Errorf("source: slot lag: %w", err)
	}
	return lag, nil
}

// LogicalAvailable says whether the server can stream logical changes to
// this user, and if not, why; it exists so a tail can choose between
// logical replication and polling by itself.
func LogicalAvailable(ctx context.Context, dsn string) (string, bool) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Sprintf("cannot check the server: %v", err), false
	}
	defer conn.Close(ctx)
	why, ok, err := logicalAllowed(ctx, conn)
	if err != nil {
		return fmt.Sprintf("cannot check the server: %v", err), false
	}
	return why, ok
}

// logicalAllowed says whether the server runs wal_level=logical and the
// user may replicate, and if not, why; err is set only when it could not
// be asked.
func logicalAllowed(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (why string, ok bool, err error) {
	var level string
	var allowed bool
	if err := q.QueryRow(ctx, "SELECT current_setting('wal_level'), (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)").Scan(&level, &allowed); err != nil {
		return "", false, fmt.Errorf("check wal_level and the REPLICATION attribute: %w", err)
	}
	if level != "logical" {
		return fmt.Sprintf("the server runs wal_level=%s, and logical replication needs wal_level=logical", level), false, nil
	}
	if !allowed {
		return "the user has no REPLICATION attribute", false, nil
	}
	return "", true, nil
}
