package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/events"
)

// DefaultPollOverlap is the overlap window of Poll when none is given, and
// the window of recent rows a Snapshot's cursor remembers.
const DefaultPollOverlap = 5 * time.Second

// DefaultPollInterval is Poll's sleep between empty polls when none is
// given.
const DefaultPollInterval = time.Second

// Cursor is where Poll stands, JSON-serializable so that the caller can
// store it durably and restart Poll from it.
type Cursor struct {
	// Models holds one cursor per model; a model without one is read from
	// its first row (all of it is emitted).
	Models map[string]*ModelCursor `json:"models,omitempty"`
}

// ModelCursor is the keyset position of Poll in one meta table, ordered by
// (updated_time, resource_id), plus what it emitted within the overlap
// window, so that rows re-read there are not emitted again.
type ModelCursor struct {
	UpdatedTime time.Time `json:"updated_time"` // the greatest updated_time read (UTC, as stored: TIMESTAMP)
	ResourceID  string    `json:"resource_id"`  // the resource of the row with that time read last
	// Recent maps the resources read with an updated_time inside the
	// overlap window to the md5 of the meta data read: a row re-read with
	// the same content is skipped; a changed one is emitted.
	Recent map[string]Seen `json:"recent,omitempty"`
}

// Seen is a meta row Poll (or the Snapshot) read within the overlap window.
type Seen struct {
	UpdatedTime time.Time `json:"t"` // the row's updated_time
	Hash        string    `json:"h"` // md5(data), hex
}

// Clone returns a deep copy, to keep a Cursor that Poll passed to emit
// (Poll goes on changing the one it passes).
func (c Cursor) Clone() Cursor {
	out := Cursor{Models: make(map[string]*ModelCursor, len(c.Models))}
	for m, mc := range c.Models {
		if mc == nil {
			continue
		}
		cp := *mc
		cp.Recent = maps.Clone(mc.Recent)
		out.Models[m] = &cp
	}
	return out
}

// snapshotCursor is the Poll cursor of the snapshot tx reads: per model
// the greatest updated_time and the rows within DefaultPollOverlap of it.
func (s *Source) snapshotCursor(ctx context.Context, tx pgx.Tx, models []string) (Cursor, error) {
	c := Cursor{Models: map[string]*ModelCursor{}}
	for _, model := range models {
		table, err := s.metaTable(model)
		if err != nil {
			return c, err
		}
		mc := &ModelCursor{Recent: map[string]Seen{}}
		rows, err := tx.Query(ctx, `SELECT resource_id, updated_time, md5(data) FROM `+ident(table)+`
			WHERE updated_time >= (SELECT max(updated_time) FROM `+ident(table)+`) - make_interval(secs => $1)
			ORDER BY updated_time, resource_id`, DefaultPollOverlap.Seconds())
		if err != nil {
			return c, fmt.Errorf("source: postgres %s: read the latest metas: %w", table, err)
		}
		for rows.Next() {
			var rid, hash string
			var t time.Time
			if err := rows.Scan(&rid, &t, &hash); err != nil {
				rows.Close()
				return c, fmt.Errorf("source: postgres %s: read the latest metas: %w", table, err)
			}
			mc.UpdatedTime, mc.ResourceID = t, rid
			mc.Recent[rid] = Seen{UpdatedTime: t, Hash: hash}
		}
		if err := rows.Err(); err != nil {
			return c, fmt.Errorf("source: postgres %s: read the latest metas: %w", table, err)
		}
		c.Models[model] = mc
	}
	return c, nil
}

// PollOptions tune Poll.
type PollOptions struct {
	// Interval is the sleep after a poll that emitted nothing (0:
	// DefaultPollInterval).
	Interval time.Duration
	// Overlap is the re-read window for rows committed late with an older
	// updated_time (0: DefaultPollOverlap; negative: none).
	Overlap time.Duration
	// PurgeCheck is how often the meta tables' resource ids are listed to
	// find deleted rows (0: DefaultPurgeCheck; negative: never).
	PurgeCheck time.Duration
	// NoTables (may be nil) is called after each poll that found no meta
	// table to read, so the caller can say why nothing is published (a
	// wrong table_prefix, a database SpecStar has not written yet).
	NoTables func()
}

// Poll is the live mode for servers without wal_level=logical: it polls
// each meta table by keyset on (updated_time, resource_id), from the
// cursor's time minus overlap (0 means DefaultPollOverlap; negative, none)
// so that a row committed late with an older updated_time is still seen
// if it is at most overlap older than the newest row read. For each
// changed meta it emits the MetaRecord and, with Revisions (or from
// RevisionsFrom), every revision of the resource (not only the new one:
// the sinks are idempotent, so this is safe, but it costs one read and
// one write per revision of a changed resource each time it changes). Rows re-read within the window are
// recognized by the md5 of their data (ModelCursor.Recent) and not emitted
// again, so each poll costs a re-read of the window's rows but emits only
// changes. A meta row that disappears (a permanent delete) is found by a
// purge check, at Poll's start and then every o.PurgeCheck: each meta
// table's ids are listed and compared with the previous check's list and
// the ids emitted since (see purgecheck.go), and a PurgeRecord, stamped
// with the time of the listing's snapshot, is emitted for each id gone.
// Rows deleted while no Poll ran are not seen (the first check of a run
// only takes the list); `reconcile --prune` finds those.
//
// It loops until ctx ends (returning ctx.Err()) or emit fails, sleeping
// o.Interval after a poll that emitted nothing. cur, given with each record, is the cursor to restart from once
// that record and all before it are handled (it covers a resource only
// with its last record); it is Poll's own and changes after emit returns:
// marshal it or Clone it there. Models are those of the options, or
// discovered again at each poll; a model absent from the cursor is read
// from its first row.
func (s *Source) Poll(ctx context.Context, from Cursor, o PollOptions, emit func(model string, rec events.Record, cur Cursor) error) error {
	interval, overlap := o.Interval, o.Overlap
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	switch {
	case overlap == 0:
		overlap = DefaultPollOverlap
	case overlap < 0:
		overlap = 0
	}
	cur := from.Clone()
	if cur.Models == nil {
		cur.Models = map[string]*ModelCursor{}
	}
	var pc *purgeCheck
	saw := func(string, string) {}
	if o.PurgeCheck >= 0 {
		every := o.PurgeCheck
		if every == 0 {
			every = DefaultPurgeCheck
		}
		var err error
		if pc, err = newPurgeCheck(every); err != nil {
			return err
		}
		defer pc.close()
		saw = pc.saw
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		n, err := s.pollOnce(ctx, &cur, overlap, emit, saw, o.NoTables)
		if err == nil && pc != nil && pc.due() {
			var purged int
			purged, err = s.runPurgeCheck(ctx, pc, &cur, emit)
			n += purged
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// pollOnce polls every model once and returns how many resources it
// emitted.
func (s *Source) pollOnce(ctx context.Context, cur *Cursor, overlap time.Duration,
	emit func(string, events.Record, Cursor) error, saw func(model, rid string), noTables func()) (int, error) {
	models, err := s.models(ctx, s.pool)
	if err != nil {
		return 0, err
	}
	if len(models) == 0 && noTables != nil {
		noTables()
	}
	total := 0
	for _, model := range models {
		mc := cur.Models[model]
		if mc == nil {
			mc = &ModelCursor{}
			cur.Models[model] = mc
		}
		n, err := s.pollModel(ctx, model, cur, mc, overlap, emit, saw)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (s *Source) pollModel(ctx context.Context, model string, cur *Cursor, mc *ModelCursor, overlap time.Duration,
	emit func(string, events.Record, Cursor) error, saw func(model, rid string)) (int, error) {
	table, err := s.metaTable(model)
	if err != nil {
		return 0, err
	}
	if mc.Recent == nil {
		mc.Recent = map[string]Seen{}
	}
	q := `SELECT resource_id, data, updated_time, md5(data) FROM ` + ident(table) + `
		WHERE updated_time >= $1 AND ($3 OR updated_time > $1 OR resource_id > $2)
		ORDER BY updated_time, resource_id LIMIT ` + fmt.Sprint(snapshotPage)
	var scanT time.Time // the zero time: all rows
	if !mc.UpdatedTime.IsZero() {
		scanT = mc.UpdatedTime.Add(-overlap)
	}
	scanRID, first := "", true
	emitted := 0
	for {
		page, err := s.pollPage(ctx, model, table, q, scanT.UTC(), scanRID, first, cur, mc, emit, saw)
		emitted += page.emitted
		if err != nil {
			return emitted, err
		}
		if page.rows < snapshotPage {
			break
		}
		scanT, scanRID, first = page.lastT, page.lastRID, false
	}
	low := mc.UpdatedTime.Add(-overlap)
	for rid, seen := range mc.Recent {
		if seen.UpdatedTime.Before(low) {
			delete(mc.Recent, rid)
		}
	}
	return emitted, nil
}

type pollPageResult struct {
	rows, emitted int
	lastT         time.Time
	lastRID       string
}

// pollPage reads one page of the meta table in its own read-only
// REPEATABLE READ transaction (so a meta and its revisions agree) and
// emits the changed resources.
func (s *Source) pollPage(ctx context.Context, model, table, q string, scanT time.Time, scanRID string, first bool,
	cur *Cursor, mc *ModelCursor, emit func(string, events.Record, Cursor) error, saw func(model, rid string)) (pollPageResult, error) {
	var res pollPageResult
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return res, fmt.Errorf("source: postgres poll %s: begin: %w", table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, q, scanT, scanRID, first)
	if err != nil {
		return res, fmt.Errorf("source: postgres poll %s after (%s, %q): %w", table, scanT.Format(time.RFC3339Nano), scanRID, err)
	}
	page, err := collectMetas(rows)
	if err != nil {
		return res, fmt.Errorf("source: postgres poll %s after (%s, %q): %w", table, scanT.Format(time.RFC3339Nano), scanRID, err)
	}
	res.rows = len(page)
	if len(page) > 0 {
		res.lastT, res.lastRID = page[len(page)-1].updated, page[len(page)-1].rid
	}
	advance := func(m *metaRow) {
		if m.updated.After(mc.UpdatedTime) || m.updated.Equal(mc.UpdatedTime) {
			mc.UpdatedTime, mc.ResourceID = m.updated, m.rid
		}
	}
	var changed []metaRow
	for i := range page {
		m := &page[i]
		if seen, ok := mc.Recent[m.rid]; ok && seen.Hash == m.hash {
			continue
		}
		changed = append(changed, *m)
	}
	err = s.emitResources(ctx, tx, model, table, changed, true, func(rec events.Record, m *metaRow, last bool) error {
		if last {
			advance(m)
			mc.Recent[m.rid] = Seen{UpdatedTime: m.updated, Hash: m.hash}
			res.emitted++
			saw(model, m.rid)
		}
		return emit(model, rec, *cur)
	})
	if err != nil {
		return res, err
	}
	// Rows skipped as already seen move the cursor too.
	for i := range page {
		advance(&page[i])
	}
	if err := tx.Commit(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return res, fmt.Errorf("source: postgres poll %s: commit: %w", table, err)
	}
	return res, nil
}
