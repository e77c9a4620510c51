package postgres

// Decoding the pgoutput stream: relations mapped to SpecStar's tables,
// rows collected per transaction, and DumpRecords emitted at its commit.

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/events"
)

type relKind int

const (
	relOther relKind = iota
	relMeta
	relIndex
	relData
)

type logicalRel struct {
	kind    relKind
	model   string
	col     int // resource_id (meta, index) or uid (data) column
	dataCol int // a meta table's or resource_data's data column (-1: none)
	infoCol int // resource_data's info column (-1: none)
	uidCol  int // resource_index's uid column (-1: none)
	revCol  int // resource_index's revision_id column (-1: none)
	svCol   int // resource_index's schema_version column (-1: none)
	name    string
}

// walRevision is a resource_data row as a transaction wrote it, taken
// from the WAL; info or data is nil when the WAL did not carry it
// (unchanged TOAST of an UPDATE).
type walRevision struct {
	info, data []byte
}

// walIndex is a resource_index row as a transaction wrote it.
type walIndex struct {
	rid, revID, sv, uid string
}

// change is the last change of a meta row in a transaction.
type change struct {
	upsert bool
	data   []byte // the meta row's data as of the transaction (nil: read it back)
}

type changeKey struct{ model, rid string }

// logicalStream is the decoding state of one StreamLogical.
type logicalStream struct {
	s    *Source
	h    LogicalHandler
	rels map[uint32]*logicalRel
	last pglogrepl.LSN // the end of the last transaction (or position) handed to Commit

	inTx      bool
	committed time.Time // the commit time of the transaction being emitted

	// The newest transaction emitted but not yet handed to Commit, how
	// many are pending and since when (see logicalCommitWait).
	pending      pglogrepl.LSN
	pendingN     int
	pendingSince time.Time
	order        []changeKey
	op           map[changeKey]change
	idxRID       []string // resource ids of resource_index rows written
	uids         []string // uids of resource_data rows written
	idxRows      []walIndex
	revs         map[string]walRevision // resource_data rows written, by uid
}

func (st *logicalStream) relation(m *pglogrepl.RelationMessage) {
	r := &logicalRel{kind: relOther, col: -1, dataCol: -1, infoCol: -1, uidCol: -1, revCol: -1, svCol: -1, name: m.RelationName}
	col := "resource_id"
	switch {
	case st.s.opts.Revisions && m.RelationName == st.s.indexTable:
		r.kind = relIndex
	case st.s.opts.Revisions && m.RelationName == st.s.dataTable:
		r.kind, col = relData, "uid"
	default:
		if model, ok := st.s.modelOfTable(m.RelationName); ok {
			r.kind, r.model = relMeta, model
		}
	}
	for i, c := range m.Columns {
		if c.Name == col {
			r.col = i
		}
		switch c.Name {
		case "data":
			r.dataCol = i
		case "info":
			r.infoCol = i
		case "uid":
			r.uidCol = i
		case "revision_id":
			r.revCol = i
		case "schema_version":
			r.svCol = i
		}
	}
	if r.col < 0 {
		r.kind = relOther
	}
	st.rels[m.RelationID] = r
}

// modelOfTable is the model whose meta table is name, if any.
func (s *Source) modelOfTable(name string) (string, bool) {
	before, after, ok := strings.Cut(s.tmpl, "{model}")
	if !ok {
		for _, m := range s.opts.Models {
			if t, err := s.metaTable(m); err == nil && t == name {
				return m, true
			}
		}
		return "", false
	}
	head := s.opts.TablePrefix + before
	if !strings.HasPrefix(name, head) || !strings.HasSuffix(name, after) || len(name) <= len(head)+len(after) {
		return "", false
	}
	model := name[len(head) : len(name)-len(after)]
	if !validModel(model) || len(s.opts.Models) > 0 && !slices.Contains(s.opts.Models, model) {
		return "", false
	}
	return model, true
}

func (st *logicalStream) set(k changeKey, c change) {
	if _, ok := st.op[k]; !ok {
		st.order = append(st.order, k)
	}
	st.op[k] = c
}

// tupleBytea decodes a bytea column in pgoutput's text format (hex
// output); nil when absent, unchanged TOAST or not hex.
func tupleBytea(t *pglogrepl.TupleData, col int) []byte {
	v, ok := tupleText(t, col)
	if !ok || !strings.HasPrefix(v, `\x`) {
		return nil
	}
	b, err := hex.DecodeString(v[2:])
	if err != nil {
		return nil
	}
	return b
}

func tupleText(t *pglogrepl.TupleData, col int) (string, bool) {
	if t == nil || col >= len(t.Columns) || t.Columns[col].DataType != pglogrepl.TupleDataTypeText {
		return "", false
	}
	return string(t.Columns[col].Data), true
}

func (st *logicalStream) row(relID uint32, tuple *pglogrepl.TupleData, upsert bool) error {
	r := st.rels[relID]
	if r == nil {
		return fmt.Errorf("source: logical stream: change of relation %d before its description", relID)
	}
	v, ok := tupleText(tuple, r.col)
	switch {
	case r.kind == relOther:
		return nil
	case !ok:
		return fmt.Errorf("source: logical stream: %s change without a key value", r.name)
	case r.kind == relMeta:
		c := change{upsert: upsert}
		if upsert && r.dataCol >= 0 {
			c.data = tupleBytea(tuple, r.dataCol)
		}
		st.set(changeKey{r.model, v}, c)
	case !upsert: // revisions deleted: nothing to emit
	case r.kind == relIndex:
		st.idxRID = append(st.idxRID, v)
		uid, _ := tupleText(tuple, r.uidCol)
		rev, _ := tupleText(tuple, r.revCol)
		sv, _ := tupleText(tuple, r.svCol)
		st.idxRows = append(st.idxRows, walIndex{rid: v, revID: rev, sv: sv, uid: uid})
	case r.kind == relData:
		st.uids = append(st.uids, v)
		st.revs[v] = walRevision{info: tupleBytea(tuple, r.infoCol), data: tupleBytea(tuple, r.dataCol)}
	}
	return nil
}

func (st *logicalStream) handle(ctx context.Context, data []byte) error {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("source: logical stream: decode pgoutput message: %w", err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		st.relation(m)
	case *pglogrepl.BeginMessage:
		st.inTx, st.order, st.op, st.idxRID, st.uids = true, nil, map[changeKey]change{}, nil, nil
		st.idxRows, st.revs = nil, map[string]walRevision{}
	case *pglogrepl.InsertMessage:
		return st.row(m.RelationID, m.Tuple, true)
	case *pglogrepl.UpdateMessage:
		if r := st.rels[m.RelationID]; r != nil && r.kind == relMeta && m.OldTuple != nil {
			// The key changed: the old resource id is gone.
			if old, ok := tupleText(m.OldTuple, r.col); ok {
				if nw, _ := tupleText(m.NewTuple, r.col); nw != old {
					st.set(changeKey{r.model, old}, change{})
				}
			}
		}
		return st.row(m.RelationID, m.NewTuple, true)
	case *pglogrepl.DeleteMessage:
		return st.row(m.RelationID, m.OldTuple, false)
	case *pglogrepl.CommitMessage:
		st.inTx = false
		st.committed = m.CommitTime
		lsn := m.TransactionEndLSN
		if lsn <= st.last {
			return nil // already confirmed before a restart
		}
		if err := st.emitTx(ctx, lsn); err != nil {
			return err
		}
		st.last = lsn
		if st.h.Commit != nil {
			if st.pendingN == 0 {
				st.pendingSince = time.Now()
			}
			st.pending = lsn
			st.pendingN++
		}
	}
	return nil
}

// commitPending hands the newest emitted transaction to Commit.
func (st *logicalStream) commitPending() error {
	lsn := st.pending
	st.pending, st.pendingN = 0, 0
	return st.h.Commit(lsn)
}

// visibleWait bounds how long emitTx waits for a decoded transaction to
// become visible to queries.
const visibleWait = 10 * time.Second

// waitVisible waits until the resource_data rows a decoded transaction
// wrote are visible to new snapshots. The walsender can hand over a
// COMMIT a moment before the transaction is visible to other sessions,
// and the revisions are read by query: without the wait, a busy server
// lets the newest revision of a resource slip past.
func (s *Source) waitVisible(ctx context.Context, uids []string) error {
	if len(uids) == 0 {
		return nil
	}
	want := len(slices.Compact(slices.Sorted(slices.Values(uids))))
	deadline := time.Now().Add(visibleWait)
	for {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT uid) FROM `+ident(s.dataTable)+` WHERE uid = ANY($1)`, uids).Scan(&n)
		if err != nil {
			return fmt.Errorf("source: logical stream: wait for the transaction to be visible: %w", err)
		}
		if n >= want || time.Now().After(deadline) {
			return nil // past the deadline the rows were deleted since: go on
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// emitTx emits the resources one transaction changed.
func (st *logicalStream) emitTx(ctx context.Context, lsn pglogrepl.LSN) error {
	s := st.s
	if len(st.order) == 0 && len(st.idxRID) == 0 && len(st.uids) == 0 {
		return nil
	}
	if done, err := st.emitFromWAL(lsn); done || err != nil {
		return err
	}
	if err := s.waitVisible(ctx, st.uids); err != nil {
		return err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("source: logical stream: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Revisions written without their meta: find their resources' models.
	rids := st.idxRID
	if len(st.uids) > 0 {
		rows, err := tx.Query(ctx, `SELECT DISTINCT resource_id FROM `+ident(s.indexTable)+` WHERE uid = ANY($1)`, st.uids)
		if err != nil {
			return fmt.Errorf("source: logical stream: resources of changed revisions: %w", err)
		}
		more, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("source: logical stream: resources of changed revisions: %w", err)
		}
		rids = append(rids, more...)
	}
	covered := map[string]bool{}
	for _, k := range st.order {
		covered[k.rid] = true
	}
	var orphans []string
	for _, rid := range rids {
		if !covered[rid] {
			covered[rid] = true
			orphans = append(orphans, rid)
		}
	}
	if len(orphans) > 0 {
		models, err := s.models(ctx, tx)
		if err != nil {
			return err
		}
		for _, model := range models {
			table, err := s.metaTable(model)
			if err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT resource_id FROM `+ident(table)+` WHERE resource_id = ANY($1)`, orphans)
			if err != nil {
				return fmt.Errorf("source: logical stream: %s: %w", table, err)
			}
			found, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("source: logical stream: %s: %w", table, err)
			}
			for _, rid := range found {
				st.set(changeKey{model, rid}, change{upsert: true})
			}
		}
	}
	// Upserts, grouped by model: the meta as the transaction wrote it
	// (read back when the change did not carry it), revisions read in
	// one snapshot.
	byModel := map[string][]metaRow{}
	readBack := map[string][]string{}
	var models []string
	for _, k := range st.order {
		c := st.op[k]
		if !c.upsert {
			continue
		}
		if byModel[k.model] == nil && readBack[k.model] == nil {
			models = append(models, k.model)
		}
		if c.data != nil {
			byModel[k.model] = append(byModel[k.model], metaRow{rid: k.rid, data: c.data})
		} else {
			readBack[k.model] = append(readBack[k.model], k.rid)
		}
	}
	for _, model := range models {
		table, err := s.metaTable(model)
		if err != nil {
			return err
		}
		page := byModel[model]
		if len(readBack[model]) > 0 {
			rows, err := tx.Query(ctx, `SELECT resource_id, data, updated_time, '' FROM `+ident(table)+
				` WHERE resource_id = ANY($1) ORDER BY resource_id`, readBack[model])
			if err != nil {
				return fmt.Errorf("source: logical stream: read %s: %w", table, err)
			}
			more, err := collectMetas(rows)
			if err != nil {
				return fmt.Errorf("source: logical stream: read %s: %w", table, err)
			}
			page = append(page, more...)
		}
		err = s.emitResources(ctx, tx, model, table, page, true, func(rec events.Record, _ *metaRow, _ bool) error {
			return st.h.Record(model, rec, lsn)
		})
		if err != nil {
			return err
		}
	}
	for _, k := range st.order {
		if st.op[k].upsert {
			continue
		}
		if err := st.h.Purge(k.model, k.rid, lsn, st.committed); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// emitFromWAL emits a transaction from what the WAL carried, without a
// query, when that is all of it: every meta row upserted came with its
// data, every resource_data row written came with its info and data and
// has its resource_index row in the same transaction, and every revision
// belongs to a resource whose meta the transaction upserted (SpecStar's
// create, update, restore and migrate all look like this). Each meta is
// followed by the revisions the transaction wrote for it, and only those:
// the earlier ones went out with the snapshot or with their own
// transactions, so an update costs the same at 10 revisions as at 10,000.
// It reports false, having emitted nothing, when the transaction needs
// the read-back path.
func (st *logicalStream) emitFromWAL(lsn pglogrepl.LSN) (bool, error) {
	if !st.s.opts.Revisions {
		return false, nil
	}
	metas := map[string]bool{} // resource ids whose meta is upserted with its data
	for _, k := range st.order {
		c := st.op[k]
		if c.upsert && c.data == nil {
			return false, nil
		}
		if c.upsert {
			metas[k.rid] = true
		}
	}
	byRID := map[string][]walIndex{}
	seen := map[string]bool{}
	for _, x := range st.idxRows {
		r, ok := st.revs[x.uid]
		if !ok || r.info == nil || r.data == nil || !metas[x.rid] {
			return false, nil
		}
		byRID[x.rid] = append(byRID[x.rid], x)
		seen[x.uid] = true
	}
	for uid := range st.revs {
		if !seen[uid] {
			return false, nil
		}
	}
	s := st.s
	for _, k := range st.order {
		c := st.op[k]
		if !c.upsert {
			continue
		}
		table, err := s.metaTable(k.model)
		if err != nil {
			return true, err
		}
		meta, err := events.DecodeResourceMeta(s.enc, c.data)
		if err != nil {
			return true, fmt.Errorf("source: postgres %s row %q: data: %w", table, k.rid, err)
		}
		b, err := meta.Encode(events.Msgpack)
		if err != nil {
			return true, fmt.Errorf("source: postgres %s row %q: re-encode meta: %w", table, k.rid, err)
		}
		if err := st.h.Record(k.model, &events.MetaRecord{Data: b}, lsn); err != nil {
			return true, err
		}
		xs := byRID[k.rid]
		slices.SortStableFunc(xs, func(a, b walIndex) int {
			if c := len(a.revID) - len(b.revID); c != 0 {
				return c
			}
			return cmp.Or(strings.Compare(a.revID, b.revID), strings.Compare(a.sv, b.sv))
		})
		for _, x := range xs {
			where := fmt.Sprintf("source: postgres %s row (%q, %q, %q) uid %q", s.indexTable, x.rid, x.revID, x.sv, x.uid)
			r := st.revs[x.uid]
			info, err := events.DecodeRevisionInfo(s.enc, r.info)
			if err != nil {
				return true, fmt.Errorf("%s: info: %w", where, err)
			}
			raw := &events.RawResource{Info: *info, RawData: r.data}
			b, err := raw.Encode(events.Msgpack)
			if err != nil {
				return true, fmt.Errorf("%s: encode: %w", where, err)
			}
			if err := st.h.Record(k.model, &events.RevisionRecord{Data: b}, lsn); err != nil {
				return true, err
			}
		}
	}
	for _, k := range st.order {
		if st.op[k].upsert {
			continue
		}
		if err := st.h.Purge(k.model, k.rid, lsn, st.committed); err != nil {
			return true, err
		}
	}
	return true, nil
}
