package postgres

// Logical replication: the live mode for servers with wal_level=logical.
// A publication on the meta tables (and, with Revisions, the resource
// tables) and a pgoutput slot deliver every committed change; for each
// transaction the changed resources are read back with the existing
// row-to-record helpers and handed to the caller, and the slot's
// confirmed_flush_lsn advances only to LSNs the caller confirms.

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/specstar/replicator/events"
)

// Defaults of LogicalOptions.
const (
	DefaultLogicalPublication = "specstar_replicator"  // why: likewise for the publication
	DefaultLogicalHeartbeat   = 10 * time.Second       // why: an idle stream must still report progress well inside wal_sender_timeout
	logicalReceivePoll        = 200 * time.Millisecond // how often a confirmation by the caller is looked for while idle

	// A transaction's Commit is handed over late, for several at once, so
	// that the caller's wait for durability (a JetStream round trip) is
	// paid per batch, not per transaction; the records themselves are
	// handed over at once, so this delays only the confirmation.
	logicalCommitIdle  = time.Millisecond      // the stream was quiet this long: hand the pending commit over
	logicalCommitWait  = 20 * time.Millisecond // the oldest pending commit waited this long: hand it over
	logicalCommitBatch = 512                   // this many transactions are pending: hand the newest over
)

// LogicalOptions name the slot and publication and the status interval;
// they exist so several replicators (or a replicator and other consumers)
// can share a database without sharing a slot.
type LogicalOptions struct {
	// Slot is the replication slot's name ("" = DefaultSlotFor the
	// database, or the slot of earlier versions' default where it exists
	// there): lower-case letters, digits and "_", as Postgres requires.
	Slot string
	// Publication is the publication's name ("" = DefaultLogicalPublication),
	// same characters.
	Publication string
	// Heartbeat is the longest time between two standby status updates
	// (0 = DefaultLogicalHeartbeat), sent even when idle so that the
	// server neither times the stream out nor keeps WAL the caller has
	// already confirmed.
	Heartbeat time.Duration
}

func (o LogicalOptions) withDefaults() (LogicalOptions, error) {
	if o.Publication == "" {
		o.Publication = DefaultLogicalPublication
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultLogicalHeartbeat
	}
	for _, n := range []struct{ what, v string }{{"slot", o.Slot}, {"publication", o.Publication}} {
		if n.v != "" && !logicalName.MatchString(n.v) {
			return o, fmt.Errorf("source: logical %s name %q: use 1-63 lower-case ASCII letters, digits and '_'", n.what, n.v)
		}
	}
	return o, nil
}

var logicalName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// LogicalStart is what SetupLogical found or created; it exists to carry
// the slot's start position and, for a new slot, the exported snapshot
// that SnapshotAt reads, which lives only until Close.
type LogicalStart struct {
	// Slot is the replication slot's name.
	Slot string
	// LSN is where StreamLogical starts: a new slot's consistent point, or
	// an existing slot's confirmed_flush_lsn.
	LSN pglogrepl.LSN
	// Created is true when the slot was created by this call.
	Created bool
	// SnapshotName is the snapshot exported by the slot's creation (""
	// when the slot already existed): SnapshotAt(SnapshotName) reads
	// exactly the state the slot's stream starts after. Valid until Close.
	SnapshotName string

	conn *pgconn.PgConn // the replication connection holding the snapshot
}

// Close releases the exported snapshot (and its replication connection);
// call it once SnapshotAt has started (the import survives Close) or is
// not wanted.
func (l *LogicalStart) Close() error {
	if l == nil || l.conn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.conn.Close(ctx)
	l.conn = nil
	return err
}

// logicalTables are the tables published: every model's meta table and,
// with Revisions, resource_index and resource_data.
func (s *Source) logicalTables(ctx context.Context) ([]string, error) {
	models, err := s.models(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	if len(models) == 0 {
		return nil, &PermanentError{fmt.Errorf("source: logical setup: no meta tables found to publish (table_prefix %q, meta_table %q)",
			s.opts.TablePrefix, s.tmpl)}
	}
	var tables []string
	for _, m := range models {
		t, err := s.metaTable(m)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	if s.opts.Revisions {
		tables = append(tables, s.indexTable, s.dataTable)
	}
	return tables, nil
}

// SetupLogical creates, if missing, the publication (on the meta tables of
// the source's models, plus resource_index and resource_data with
// Revisions; an existing publication gets the missing tables added;
// inserts, updates and deletes only, no truncates) and then the pgoutput
// slot. It exists so a deployment can be switched to logical replication
// without losing a change: a new slot comes with an exported snapshot
// (read it with SnapshotAt before calling Close) that holds exactly what
// the slot's stream starts after. An existing slot is returned as it is,
// with LSN its confirmed_flush_lsn and no snapshot: a caller without a
// stored position then takes a plain Snapshot (newer than the slot's
// position, so the stream re-emits some changes, which the sinks absorb).
// Models created later are not in the publication until SetupLogical runs
// again.
func (s *Source) SetupLogical(ctx context.Context, dsn string, o LogicalOptions) (*LogicalStart, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o, err = resolveSlot(ctx, s.pool, o); err != nil {
		return nil, err
	}
	// Check before creating anything: a publication made on a server that
	// cannot decode would be left behind.
	why, ok, err := logicalAllowed(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("source: logical setup: %w", err)
	}
	if !ok {
		return nil, &PermanentError{fmt.Errorf("source: logical replication is not possible here: %s", why)}
	}
	tables, err := s.logicalTables(ctx)
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, o.Publication).Scan(&exists); err != nil {
		return nil, fmt.Errorf("source: logical setup: look up publication %s: %w", o.Publication, err)
	}
	if !exists {
		quoted := make([]string, len(tables))
		for i, t := range tables {
			quoted[i] = ident(t)
		}
		_, err := s.pool.Exec(ctx, `CREATE PUBLICATION `+ident(o.Publication)+` FOR TABLE `+strings.Join(quoted, ", ")+
			` WITH (publish = 'insert, update, delete')`)
		if err != nil {
			return nil, fmt.Errorf("source: logical setup: create publication %s: %w", o.Publication, err)
		}
	} else {
		rows, err := s.pool.Query(ctx, `SELECT tablename::text FROM pg_publication_tables
			WHERE pubname = $1 AND schemaname = current_schema()`, o.Publication)
		if err != nil {
			return nil, fmt.Errorf("source: logical setup: tables of publication %s: %w", o.Publication, err)
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("source: logical setup: tables of publication %s: %w", o.Publication, err)
		}
		for _, t := range tables {
			if slices.Contains(have, t) {
				continue
			}
			if _, err := s.pool.Exec(ctx, `ALTER PUBLICATION `+ident(o.Publication)+` ADD TABLE `+ident(t)); err != nil {
				return nil, fmt.Errorf("source: logical setup: add %s to publication %s: %w", t, o.Publication, err)
			}
		}
	}

	var plugin string
	var flushed *pglogrepl.LSN
	err = s.pool.QueryRow(ctx, `SELECT plugin::text, confirmed_flush_lsn FROM pg_replication_slots
		WHERE slot_name = $1`, o.Slot).Scan(&plugin, &flushed)
	switch {
	case err == nil:
		if plugin != "pgoutput" || flushed == nil {
			return nil, fmt.Errorf("source: logical setup: slot %s exists but is not a logical pgoutput slot (plugin %q)", o.Slot, plugin)
		}
		return &LogicalStart{Slot: o.Slot, LSN: *flushed}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("source: logical setup: look up slot %s: %w", o.Slot, err)
	}
	conn, err := replicationConn(ctx, dsn)
	if err != nil {
		return nil, err
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, o.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("source: logical setup: create slot %s: %w", o.Slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("source: logical setup: slot %s consistent point %q: %w", o.Slot, res.ConsistentPoint, err)
	}
	return &LogicalStart{Slot: o.Slot, LSN: lsn, Created: true, SnapshotName: res.SnapshotName, conn: conn}, nil
}

// replicationConn opens a logical replication connection (replication=database).
func replicationConn(ctx context.Context, dsn string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("source: postgres dsn: %w", err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("source: logical replication connect to %s@%s:%d/%s: %w", cfg.User, cfg.Host, cfg.Port, cfg.Database, err)
	}
	return conn, nil
}

// SnapshotAt is Snapshot reading the exported snapshot snapshotName
// (LogicalStart.SnapshotName) instead of a fresh one; it exists so the
// initial load and the logical stream meet exactly, without a gap or
// overlap. It must be called while the LogicalStart is open. Records,
// positions and stats are Snapshot's (SnapshotID is snapshotName). A
// resumed snapshot (from not the start) cannot re-read the exported
// snapshot once it is gone: resume with Snapshot instead (see
// SetupLogical).
func (s *Source) SnapshotAt(ctx context.Context, snapshotName string, from Position, emit func(model string, rec events.Record, pos Position) error) (SnapshotStats, error) {
	return s.snapshot(ctx, snapshotName, from, emit)
}

// LogicalHandler receives what StreamLogical reads; it exists so the
// caller (the JetStream publisher) decides when a position is durable.
type LogicalHandler struct {
	// Record receives, per changed resource of a committed transaction,
	// its MetaRecord and (with Revisions or RevisionsFrom) every
	// RevisionRecord, lsn being the transaction's end LSN.
	Record func(model string, rec events.Record, lsn pglogrepl.LSN) error
	// Purge receives a meta row's DELETE (a permanent delete).
	Purge func(model, resourceID string, lsn pglogrepl.LSN, committed time.Time) error
	// Commit (may be nil) follows the last Record/Purge of a transaction,
	// at most logicalCommitWait later and then for every transaction
	// emitted before it (commits are handed over in batches, so the wait
	// for durability is paid once per batch): once everything handed over
	// up to it is durable the caller may confirm lsn and store it as its
	// restart position. It is also called
	// while idle with the server's WAL position, so that an idle slot's
	// position moves too (only once everything before was confirmed).
	Commit func(lsn pglogrepl.LSN) error
	// Idle (may be nil) is called on every turn of the receive loop, at
	// least every logicalReceivePoll, so that a caller that stores its
	// position before confirming it (at its own pace) may do so for the
	// last LSN handed to Commit; it must return quickly when it has
	// nothing to do. (A server shutting down waits for the confirmation
	// of everything it sent, while keepalives keep the loop busy.)
	Idle func() error
	// Confirmed returns the greatest LSN whose records are durable (at
	// first the startLSN); only it is reported to Postgres as flushed, so
	// the slot never forgets a change that is not durable.
	Confirmed func() pglogrepl.LSN
}

// StreamLogical follows the slot from startLSN (a stored confirmed
// position, or LogicalStart.LSN) until ctx ends (returning ctx.Err()) or
// a handler fails; it exists as the primary live mode, which sees every
// committed change including deletes. For each committed transaction,
// every meta row it inserted or updated gives a MetaRecord of the data the
// transaction wrote (taken from the WAL; read back from the table only if
// the WAL carries no value, e.g. unchanged TOAST), followed, with
// Revisions, by the revisions the transaction wrote, taken from the WAL
// too (see emitFromWAL; SpecStar's writes always take this path, and it
// costs the same whatever the resource's history). A transaction the WAL
// does not fully describe (unchanged TOAST, revisions written without
// their meta) has its resources' revisions read with a plain REPEATABLE
// READ query after the commit, i.e. all revisions existing then (a
// superset of those at the commit; none if the resource was deleted
// since), or, with
// RevisionsFrom, listed from that store after the commit (SpecStar wrote
// them before the meta; a lagging listing is waited for, see
// Options.RevisionsWait). Resources
// whose resource_index / resource_data rows changed without their meta
// are read back whole. Each meta row deleted gives a Purge. Standby status updates report
// h.Confirmed() (never less than startLSN) at least every Heartbeat and
// soon after it changes. The replication connection is blocked while a
// transaction's records are read and handed over.
func (s *Source) StreamLogical(ctx context.Context, dsn string, o LogicalOptions, startLSN pglogrepl.LSN, h LogicalHandler) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	if o, err = resolveSlot(ctx, s.pool, o); err != nil {
		return err
	}
	if h.Record == nil || h.Purge == nil || h.Confirmed == nil {
		return errors.New("source: logical stream: Record, Purge and Confirmed handlers are required")
	}
	conn, err := replicationConn(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	err = pglogrepl.StartReplication(ctx, conn, o.Slot, startLSN, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names '" + o.Publication + "'"},
	})
	if err != nil {
		return fmt.Errorf("source: logical stream: start replication on slot %s at %s: %w", o.Slot, startLSN, err)
	}
	st := &logicalStream{s: s, h: h, rels: map[uint32]*logicalRel{}, last: startLSN}
	confirmed := func() pglogrepl.LSN { return max(h.Confirmed(), startLSN) }
	var sent pglogrepl.LSN
	lastSent := time.Time{}
	status := func(reply bool) error {
		c := confirmed()
		err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: c, WALFlushPosition: c, WALApplyPosition: c, ReplyRequested: reply})
		if err != nil {
			return fmt.Errorf("source: logical stream: standby status: %w", err)
		}
		sent, lastSent = c, time.Now()
		return nil
	}
	if err := status(false); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if st.pendingN > 0 && (st.pendingN >= logicalCommitBatch || time.Since(st.pendingSince) >= logicalCommitWait) {
			if err := st.commitPending(); err != nil {
				return err
			}
		}
		if h.Idle != nil {
			if err := h.Idle(); err != nil {
				return err
			}
		}
		if time.Since(lastSent) >= o.Heartbeat {
			// When idle, ask for a keepalive: its WAL position lets the
			// slot advance past WAL that holds nothing of ours.
			if err := status(!st.inTx && confirmed() >= st.last); err != nil {
				return err
			}
		} else if confirmed() != sent {
			if err := status(false); err != nil {
				return err
			}
		}
		wait := min(time.Until(lastSent.Add(o.Heartbeat)), logicalReceivePoll)
		if st.pendingN > 0 {
			wait = logicalCommitIdle
		}
		rctx, cancel := context.WithTimeout(ctx, max(wait, time.Millisecond))
		raw, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if st.pendingN > 0 {
					if err := st.commitPending(); err != nil {
						return err
					}
				}
				continue
			}
			return fmt.Errorf("source: logical stream: receive: %w", err)
		}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("source: logical stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("source: logical stream: keepalive: %w", err)
				}
				if !st.inTx && ka.ServerWALEnd > st.last && confirmed() >= st.last && h.Commit != nil {
					// Everything before the server's position was sent and
					// everything sent is confirmed: offer the position.
					st.last = ka.ServerWALEnd
					if err := h.Commit(st.last); err != nil {
						return err
					}
				}
				if ka.ReplyRequested {
					if err := status(false); err != nil {
						return err
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("source: logical stream: xlog data: %w", err)
				}
				if err := st.handle(ctx, xld.WALData); err != nil {
					return err
				}
			}
		}
	}
}

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
