package postgres

// Flush: one transaction per batch, reading the rows the batch touches,
// deciding (newer meta wins, content-addressed revisions) and writing
// with compare-and-swap, in rounds while other writers race it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// pgMaxRounds bounds how often one Flush re-reads rows that other writers
// changed between its read and its write.
const pgMaxRounds = 8

// Flush writes everything applied since the last successful Flush in ONE
// transaction; the caller acks only after it returns nil. Its errors are
// transient (connection, deadlock, serialization): the queue is kept, and
// a retried Flush executes it again, which is safe because every write is
// idempotent. Permanent problems were refused by Apply.
//
// How: the rows the queue touches are read (one batch); the Disk sink's
// rules decide, in Go and in queue order, what each row becomes
// (total_revision_count and parent_schema_version live only inside the
// encoded bytes, so the order cannot be a comparison of columns); the rows
// that change are written, in key order, by INSERT ... ON CONFLICT DO
// UPDATE ... WHERE <the row still holds the bytes the decision was taken
// on>: a compare-and-swap, which Postgres evaluates on the latest version
// of the row after locking it. If another writer changed or created a row
// in between, that statement writes nothing and the rows are read and
// decided again, in the same transaction. So no concurrent writer is ever
// rolled back, and a row that is already right is neither written nor
// locked (its xmin stays). Deadlocks between writers are possible in
// principle (Postgres breaks them by failing one transaction): a transient
// error, as above.
func (p *Sink) Flush(ctx context.Context) error {
	return p.flush(ctx, true)
}

// flush writes what was sealed and, with all, what was applied since.
func (p *Sink) flush(ctx context.Context, all bool) error {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("sink: postgres sink is closed")
	}
	pending := p.sealed
	p.sealed = nil
	if all {
		pending = append(pending, p.queue...)
		p.queue = nil
	}
	p.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	err := p.ensureTables(ctx, pending)
	if err == nil {
		err = p.execute(ctx, pending)
	}
	if err != nil {
		p.mu.Lock()
		// in front of what was sealed meanwhile (by then the next
		// batch), and sealed: the retry writes it first
		p.sealed = append(pending, p.sealed...)
		if pgUndefined(err) {
			// A table was dropped behind our back: the next Flush
			// creates it again rather than failing forever.
			clear(p.tables)
			p.lostRev = true
		}
		p.mu.Unlock()
		return err
	}
	p.mu.Lock()
	p.refused = append(p.refused, p.roundRefused...)
	for _, w := range pending {
		if w.meta != nil {
			delete(p.firstMeta, w.meta.key) // now stored, where the check reads it
		}
	}
	p.mu.Unlock()
	return nil
}

// OverlapsFlush reports that this sink can write one batch while the
// next is applied (sink.Overlapper): Apply only queues, and a Flush takes
// what it writes from the queue at its start, giving back in front what
// it could not write. Not with OnDuplicate "skip" or "raise_error", whose
// Apply reads the stored meta and the metas queued but not yet stored,
// which a Flush running beside it moves from one to the other.
func (p *Sink) OverlapsFlush() bool {
	return p.opts.OnDuplicate != store.DupSkip && p.opts.OnDuplicate != store.DupRaise
}

// TakeRefusals returns the revisions the flushes since the last call
// refused (sink.Refuser), each a uid another resource holds, once.
func (p *Sink) TakeRefusals() []store.Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.refused
	p.refused = nil
	return out
}

// Seal ends a batch: what was applied until now is what FlushSealed
// writes (sink.Overlapper); what is applied from now on waits for the next
// Seal, or a Flush.
func (p *Sink) Seal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sealed = append(p.sealed, p.queue...)
	p.queue = nil
}

// FlushSealed is Flush for what was applied before the last Seal only
// (sink.Overlapper), so that a batch is written while the next one is
// being applied.
func (p *Sink) FlushSealed(ctx context.Context) error {
	return p.flush(ctx, false)
}

// execute runs one transaction: rounds of read-decide-write until no
// compare-and-swap misses, then commit. While the sink is fresh (the last
// read found none of its rows: a backlog into a new database), a large
// queue without purges is first decided as if none of its rows existed,
// without reading: every row it touches is then new and written by COPY
// (copyGuessed, with no savepoint), which fails on a key that exists
// after all, so the decision stands only if it was right; else the
// transaction is rolled back and done again, reading first.
func (p *Sink) execute(ctx context.Context, pending []pgWrite) error {
	blind := p.fresh && len(pending) >= p.copyFrom
	for _, w := range pending {
		blind = blind && w.purge == nil
	}
	var tx pgx.Tx // begun by the first round's read batch
	defer func() {
		if tx != nil {
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	for round := 1; ; round++ {
		missed, err := p.round(ctx, &tx, pending, !blind || round > 1)
		if errors.Is(err, errGuessedWrong) {
			// A row the blind round took for new exists: its COPY failed
			// and took the transaction with it. Again, reading first.
			if rerr := tx.Rollback(ctx); rerr != nil {
				return fmt.Errorf("sink: postgres rollback: %w", rerr)
			}
			tx, blind, p.fresh, round = nil, false, false, 0
			continue
		}
		if err != nil {
			return err
		}
		if missed == 0 {
			break
		}
		if round == pgMaxRounds {
			return fmt.Errorf("sink: postgres: %d rows kept changing under concurrent writers after %d rounds", missed, round)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sink: postgres commit: %w", err)
	}
	return nil
}

// pgMetaState is one meta row during a round: as read, and as decided.
type pgMetaState struct {
	sql     *pgMetaSQL
	orig    []byte // nil: no row
	cur     []byte
	row     []any // the columns to write, if cur is not orig
	ordered bool  // updated and count are known (cur decodes)
	updated time.Time
	count   int64
}

// pgDataState is one resource_data row during a round.
type pgDataState struct {
	origData, origInfo []byte // nil: no row
	data, info         []byte
	decoded            *events.RevisionInfo // info decoded; nil if it does not decode
	purged             bool                 // a purge removed it (unless a later revision wrote info again)
}

// pgSlotState is one resource_index row during a round.
type pgSlotState struct{ orig, cur string } // "" = no row

// round reads the rows the queue touches, decides, and writes the rows
// that change; it returns how many compare-and-swaps missed. *tx is nil
// in the first round, whose read batch begins the transaction (saving a
// round trip). Without read it decides as if none of the rows existed
// (see execute).
//
// The reads take no locks: every decision depends only on the row it
// writes, whose write is a compare-and-swap, except one: a resource_index
// row naming another uid moves only if the revision supersedes that uid's
// info, so those rows are read again FOR SHARE and cannot change until
// commit. Rows that end unchanged are neither written nor locked.
func (p *Sink) round(ctx context.Context, tx *pgx.Tx, pending []pgWrite, read bool) (int, error) {
	// Sized for the queue: a backlog's batch holds thousands of rows, and
	// growing these maps showed in the profile of a drain.
	metas := make(map[pgMetaKey]*pgMetaState, len(pending)/8)
	slots := make(map[pgSlotKey]*pgSlotState, len(pending))
	datas := make(map[string]*pgDataState, len(pending))
	byTable := map[string][]string{}
	tableSQL := map[string]*pgMetaSQL{}
	purgeRids := map[string]bool{}
	for _, w := range pending {
		switch {
		case w.purge != nil:
			if _, ok := metas[w.purge.key]; !ok {
				metas[w.purge.key] = &pgMetaState{sql: w.purge.sql}
				byTable[w.purge.key.table] = append(byTable[w.purge.key.table], w.purge.key.rid)
				tableSQL[w.purge.key.table] = w.purge.sql
			}
			if p.opts.Revisions {
				purgeRids[w.purge.key.rid] = true
			}
		case w.meta != nil:
			if _, ok := metas[w.meta.key]; !ok {
				metas[w.meta.key] = &pgMetaState{sql: w.meta.sql}
				byTable[w.meta.key.table] = append(byTable[w.meta.key.table], w.meta.key.rid)
				tableSQL[w.meta.key.table] = w.meta.sql
			}
		case w.rev != nil:
			if _, ok := slots[w.rev.slot]; !ok {
				slots[w.rev.slot] = &pgSlotState{}
			}
			if _, ok := datas[w.rev.info.UID]; !ok {
				datas[w.rev.info.UID] = &pgDataState{}
			}
		}
	}

	var err error
	if !read {
		if *tx == nil {
			if *tx, err = p.pool.Begin(ctx); err != nil {
				return 0, fmt.Errorf("sink: postgres begin: %w", err)
			}
		}
	} else {
		if err := p.read(ctx, tx, pending, metas, slots, datas, byTable, tableSQL, purgeRids); err != nil {
			return 0, err
		}
		p.fresh = pgNoneRead(metas, slots, datas)
	}

	// Decide, in queue order, as the Disk sink would apply the records.
	p.roundRefused = p.roundRefused[:0]
	for _, st := range metas {
		st.cur = st.orig
		if st.orig != nil {
			if m, err := events.DecodeResourceMeta(p.enc, st.orig); err == nil {
				st.ordered, st.updated, st.count = true, m.UpdatedTime.Instant(), m.TotalRevisionCount
			}
		}
	}
	for _, st := range slots {
		st.cur = st.orig
	}
	for _, st := range datas {
		st.data, st.info = st.origData, st.origInfo
		if st.origInfo != nil {
			if info, err := events.DecodeRevisionInfo(p.enc, st.origInfo); err == nil {
				st.decoded = info
			}
		}
	}
	for _, w := range pending {
		switch {
		case w.meta != nil:
			p.decideMeta(metas[w.meta.key], w.meta)
		case w.purge != nil:
			p.decidePurge(metas[w.purge.key], slots, datas, w.purge)
		default:
			if r := pgDecideRevision(slots, datas, w.rev); r != nil {
				p.roundRefused = append(p.roundRefused, *r)
			}
		}
	}

	// Write the rows that change: metas, then resource_data, then
	// resource_index (whose uid references resource_data), in key order.
	var ch pgChanges
	var del pgDeletes
	keys := make([]pgMetaKey, 0, len(metas))
	for k := range metas {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].table != keys[j].table {
			return keys[i].table < keys[j].table
		}
		return keys[i].rid < keys[j].rid
	})
	for _, k := range keys {
		st := metas[k]
		if bytes.Equal(st.cur, st.orig) && (st.cur == nil) == (st.orig == nil) {
			continue
		}
		if st.cur == nil {
			del.metas = append(del.metas, pgMetaChange{sql: st.sql, row: []any{k.rid}, prev: st.orig})
			continue
		}
		ch.metas = append(ch.metas, pgMetaChange{sql: st.sql, row: st.row, prev: st.orig})
	}
	for _, uid := range pgSortedKeys(datas) {
		st := datas[uid]
		if st.info == nil {
			if st.purged && st.origInfo != nil {
				del.datas = append(del.datas, pgDataChange{uid: uid, prevData: st.origData, prevInfo: st.origInfo})
			}
			continue // another uid, only read for comparison
		}
		if st.origInfo != nil && bytes.Equal(st.data, st.origData) && bytes.Equal(st.info, st.origInfo) {
			continue
		}
		ch.datas = append(ch.datas, pgDataChange{uid: uid, data: st.data, info: st.info, prevData: st.origData, prevInfo: st.origInfo})
	}
	for _, k := range pgSortedSlotKeys(slots) {
		if st := slots[k]; st.cur == "" && st.orig != "" {
			del.slots = append(del.slots, pgSlotChange{key: k, prev: st.orig})
		} else if st.cur != st.orig {
			ch.slots = append(ch.slots, pgSlotChange{key: k, uid: st.cur, prev: st.orig})
		}
	}
	n := len(ch.metas) + len(ch.datas) + len(ch.slots)
	missed := 0
	switch {
	case n == 0:
	case n >= p.copyFrom:
		missed, err = p.writeCopy(ctx, *tx, &ch, read)
	default:
		missed, err = p.writeBatch(ctx, *tx, &ch)
	}
	if err != nil || del.len() == 0 {
		return missed, err
	}
	m, err := p.writeDeletes(ctx, *tx, &del)
	return missed + m, err
}

// pgChanges are the rows a round writes, each with the content it must
// still have for the write to happen (nil or "": no row).
type pgChanges struct {
	metas []pgMetaChange
	datas []pgDataChange
	slots []pgSlotChange
}

type pgMetaChange struct {
	sql  *pgMetaSQL
	row  []any // the 14 columns
	prev []byte
}

type pgDataChange struct {
	uid                            string
	data, info, prevData, prevInfo []byte
}

type pgSlotChange struct {
	key       pgSlotKey
	uid, prev string
}

// writeBatch writes the changes as one pipelined batch of upserts, each a
// compare-and-swap, and returns how many wrote nothing.
func (p *Sink) writeBatch(ctx context.Context, tx pgx.Tx, ch *pgChanges) (int, error) {
	missed := 0
	check := func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() != 1 {
			missed++
		}
		return nil
	}
	b := &pgx.Batch{}
	for _, c := range ch.metas {
		b.Queue(c.sql.upsert, append(c.row[:14:14], pgPrev(c.prev))...).Exec(check)
	}
	for _, c := range ch.datas {
		b.Queue(p.rev.upsertData, c.uid, c.data, c.info, pgPrev(c.prevData), pgPrev(c.prevInfo)).Exec(check)
	}
	for _, c := range ch.slots {
		var prev any
		if c.prev != "" {
			prev = c.prev
		}
		b.Queue(p.rev.upsertSlot, c.key.rid, c.key.revID, c.key.sv, c.uid, prev).Exec(check)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("sink: postgres write rows: %w", err)
	}
	return missed, nil
}

// pgPrev is a previous bytes value as a parameter: NULL for no row.
func pgPrev(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// decideMeta applies one queued meta to the round's state of its row.
func (p *Sink) decideMeta(st *pgMetaState, w *pgMetaWrite) {
	set := func() {
		st.cur, st.row = w.data, w.row
		st.ordered, st.updated, st.count = true, w.updated, w.count
	}
	switch {
	case st.cur == nil:
		set()
	case bytes.Equal(st.cur, w.data):
	case p.opts.OnDuplicate == store.DupOverwrite:
		set()
	case p.opts.OnDuplicate == store.DupSkip || p.opts.OnDuplicate == store.DupRaise:
		// Another meta appeared between Apply's check and now (a
		// concurrent writer): the first one stays, as the check would
		// have decided. For "skip", the resource's revisions from now on
		// are skipped too.
		if p.opts.OnDuplicate == store.DupSkip {
			p.mu.Lock()
			m := p.skipped[w.model]
			if m == nil {
				m = map[string]struct{}{}
				p.skipped[w.model] = m
			}
			m[w.key.rid] = struct{}{}
			p.mu.Unlock()
		}
	case !st.ordered:
		set() // a stored meta that does not decode is a broken row: replaced
	default:
		c := w.updated.Compare(st.updated)
		if c == 0 {
			c = pgCmpInt64(w.count, st.count)
		}
		if c == 0 {
			c = bytes.Compare(w.data, st.cur)
		}
		if c > 0 {
			set()
		}
	}
}

func pgCmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pgDecideRevision applies one queued revision to the round's state, as
// Disk.ApplyRevision does on disk.
// It returns the refusal of a revision whose uid another resource holds.
func pgDecideRevision(slots map[pgSlotKey]*pgSlotState, datas map[string]*pgDataState, w *pgRevWrite) *store.Refusal {
	uid := w.info.UID
	slot := slots[w.slot]
	if slot.cur != "" && slot.cur != uid {
		if other := datas[slot.cur]; other != nil && other.decoded != nil &&
			!store.Supersedes(&w.info, w.infoBytes, other.decoded, other.info) {
			return nil // the slot names a newer revision
		}
	}
	st := datas[uid]
	if err := store.CheckUIDHolder(&w.info, st.decoded); err != nil {
		// The uid is another resource's: the first holder keeps it and
		// its slot, this revision is not written, and it is handed back
		// (Sink.TakeRefusals) to be dead-lettered with both ids.
		return &store.Refusal{ResourceID: w.info.ResourceID, RevisionID: w.info.RevisionID, UID: uid, Err: err}
	}
	switch {
	case st.info == nil:
		st.data, st.info, st.decoded = w.data, w.infoBytes, &w.info
	case bytes.Equal(st.info, w.infoBytes):
		st.data = w.data // a no-op unless the stored payload was damaged
	case st.decoded == nil || store.Supersedes(&w.info, w.infoBytes, st.decoded, st.info):
		st.data, st.info, st.decoded = w.data, w.infoBytes, &w.info
	}
	slot.cur = uid
	return nil
}

func (c *pgChanges) len() int { return len(c.metas) + len(c.datas) + len(c.slots) }

// split parts the changes into the rows that are new (no row was read:
// fresh) and the others, each part in the order of c.
func (c *pgChanges) split() (fresh, rest pgChanges) {
	for _, m := range c.metas {
		if m.prev == nil {
			fresh.metas = append(fresh.metas, m)
		} else {
			rest.metas = append(rest.metas, m)
		}
	}
	for _, d := range c.datas {
		if d.prevInfo == nil {
			fresh.datas = append(fresh.datas, d)
		} else {
			rest.datas = append(rest.datas, d)
		}
	}
	for _, s := range c.slots {
		if s.prev == "" {
			fresh.slots = append(fresh.slots, s)
		} else {
			rest.slots = append(rest.slots, s)
		}
	}
	return fresh, rest
}
