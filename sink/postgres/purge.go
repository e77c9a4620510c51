package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// pgPurgeWrite is a queued purge: the resource's meta row and the instant
// it was purged at.
type pgPurgeWrite struct {
	model string
	key   pgMetaKey
	sql   *pgMetaSQL
	at    time.Time
}

// ApplyPurge validates a permanent delete and queues it for the next Flush,
// returning Written ("queued"). Flush executes it in queue order with the
// other queued writes, in the same transaction: if the meta row (as
// decided so far) was updated after purgedAt (instants, naive read as UTC)
// the resource was re-created and nothing is removed; otherwise the meta
// row goes (a compare-and-swap DELETE on the bytes decided on, re-decided
// if another writer changed it), and, with Revisions, the resource's
// resource_index rows whose revision was last updated at or before
// purgedAt, then the resource_data rows they named that no resource_index
// row names any more. A purge of an absent resource is a no-op there.
//
// Known limit: no tombstone is kept, so an old meta or revision event
// redelivered after the purge (at-least-once delivery) re-creates what it
// carries; a later redelivery of the purge removes it again.
func (p *Sink) ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	if err := p.check(ctx); err != nil {
		return 0, err
	}
	table, err := p.metaTable(model)
	if err != nil {
		return 0, err
	}
	key := fmt.Sprintf("purge %q", resourceID)
	if resourceID == "" {
		return 0, store.Invalid(key, "empty resource_id")
	}
	if err := pgCheckText(key, "resource_id", resourceID, pgMaxIndexed); err != nil {
		return 0, err
	}
	s, err := p.metaSQL(ctx, table)
	if err != nil {
		return 0, err
	}
	w := &pgPurgeWrite{model: model, key: pgMetaKey{table, resourceID}, sql: s, at: purgedAt.Instant()}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, pgWrite{purge: w})
	return store.Written, nil
}

// pgPurgeSlotsSQL reads every resource_index row of the purged resources.
func (p *Sink) pgPurgeSlotsSQL() string {
	return "SELECT resource_id, revision_id, schema_version, uid FROM " + pgx.Identifier{p.indexTable}.Sanitize() +
		" WHERE resource_id = ANY($1::text[])"
}

// decidePurge applies one queued purge to the round's state, in queue
// order: the meta row unless it is newer, then the index rows of
// revisions not updated after the purge, and their data rows.
func (p *Sink) decidePurge(st *pgMetaState, slots map[pgSlotKey]*pgSlotState, datas map[string]*pgDataState, w *pgPurgeWrite) {
	if st.cur != nil && st.ordered && st.updated.After(w.at) {
		return // re-created after the purge
	}
	st.cur, st.row, st.ordered = nil, nil, false
	if !p.opts.Revisions {
		return
	}
	for k, s := range slots {
		if k.rid != w.key.rid || s.cur == "" {
			continue
		}
		d := datas[s.cur]
		if d != nil && d.decoded != nil && d.decoded.ResourceID == w.key.rid && d.decoded.UpdatedTime.Instant().After(w.at) {
			continue // a re-creation's revision
		}
		if d != nil && (d.decoded == nil || d.decoded.ResourceID == w.key.rid) {
			d.data, d.info, d.decoded, d.purged = nil, nil, nil, true
		}
		s.cur = ""
	}
}

// pgDeletes are the rows a round removes, each with the content it must
// still have for the removal to happen.
type pgDeletes struct {
	metas []pgMetaChange // row unused
	slots []pgSlotChange // uid unused
	datas []pgDataChange // data, info unused
}

func (d *pgDeletes) len() int { return len(d.metas) + len(d.slots) + len(d.datas) }

// writeDeletes removes rows, each a compare-and-swap, and returns how many
// meta and index removals found their row changed. A data row still named
// by an index row (of any resource) or changed meanwhile is left alone:
// that is not a miss, the row is simply still in use.
func (p *Sink) writeDeletes(ctx context.Context, tx pgx.Tx, del *pgDeletes) (int, error) {
	missed := 0
	check := func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() != 1 {
			missed++
		}
		return nil
	}
	b := &pgx.Batch{}
	for _, c := range del.metas {
		b.Queue("DELETE FROM "+pgx.Identifier{c.sql.table}.Sanitize()+" WHERE resource_id = $1 AND data = $2",
			c.row[0], c.prev).Exec(check)
	}
	x := pgx.Identifier{p.indexTable}.Sanitize()
	for _, c := range del.slots {
		b.Queue("DELETE FROM "+x+" WHERE resource_id = $1 AND revision_id = $2 AND schema_version = $3 AND uid = $4",
			c.key.rid, c.key.revID, c.key.sv, c.prev).Exec(check)
	}
	for _, c := range del.datas {
		b.Queue("DELETE FROM "+pgx.Identifier{p.dataTable}.Sanitize()+" AS rd WHERE rd.uid = $1 AND rd.data = $2 AND rd.info = $3"+
			" AND NOT EXISTS (SELECT 1 FROM "+x+" AS ri WHERE ri.uid = $1)",
			c.uid, c.prevData, c.prevInfo)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("sink: postgres purge rows: %w", err)
	}
	return missed, nil
}
