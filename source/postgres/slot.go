package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// legacyLogicalSlot is the default slot name of versions before
// DefaultSlotFor: one name for every database of a cluster, so a second
// deployment's tail collided with the first's. A tail that finds it in its
// own database keeps using it (its position is there).
const legacyLogicalSlot = "specstar_replicator"

// DefaultSlotFor is the replication slot a tail of database db uses when
// none is named: one per database, so that two SpecStar deployments in
// one cluster (prod and staging databases) never share a slot. Names
// Postgres would refuse (characters other than a-z, 0-9 and _, or over 63
// bytes) are folded and given a hash of the name, so that two databases
// never fold to one slot.
func DefaultSlotFor(db string) string {
	const prefix = "specstar_replicator_"
	var b strings.Builder
	for _, r := range strings.ToLower(db) {
		if r < 128 && logicalName.MatchString(string(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name == db && len(prefix)+len(name) <= 63 {
		return prefix + name
	}
	h := fnv.New32a()
	h.Write([]byte(db))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	return prefix + name[:min(len(name), 63-len(prefix)-len(suffix))] + suffix
}

// querier is what resolveSlot needs of a connection or a pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// resolveSlot gives o the slot this database's tail uses: the one named,
// or else the legacy default where it exists in this database, or else
// DefaultSlotFor the database. A slot of that name that belongs to
// another database is a PermanentError saying what to do: it is another
// deployment's, and using it (or dropping it) would take its changes.
func resolveSlot(ctx context.Context, q querier, o LogicalOptions) (LogicalOptions, error) {
	var db string
	if err := q.QueryRow(ctx, `SELECT current_database()::text`).Scan(&db); err != nil {
		return o, fmt.Errorf("source: logical slot: current database: %w", err)
	}
	slotDB := func(name string) (string, bool, error) {
		var d *string
		err := q.QueryRow(ctx, `SELECT database::text FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&d)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return "", false, nil
		case err != nil:
			return "", false, fmt.Errorf("source: logical slot: look up slot %s: %w", name, err)
		case d == nil:
			return "", true, nil // a physical slot: no database
		}
		return *d, true, nil
	}
	named := o.Slot != ""
	if !named {
		o.Slot = DefaultSlotFor(db)
		if d, ok, err := slotDB(legacyLogicalSlot); err != nil {
			return o, err
		} else if ok && d == db {
			o.Slot = legacyLogicalSlot
		}
	}
	d, ok, err := slotDB(o.Slot)
	if err != nil || !ok || d == db {
		return o, err
	}
	owner := "is a physical slot"
	if d != "" {
		owner = fmt.Sprintf("belongs to database %q", d)
	}
	return o, &PermanentError{fmt.Errorf("source: logical slot %s %s, not to %q, which this tail reads: another deployment's slot is never used or dropped here; give this one its own with --slot NAME (without --slot, %s is used)",
		o.Slot, owner, db, DefaultSlotFor(db))}
}
