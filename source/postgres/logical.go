package postgres

// Logical replication: the live mode for servers with wal_level=logical.
// A publication on the meta tables (and, with Revisions, the resource
// tables) and a pgoutput slot deliver every committed change; for each
// transaction the changed resources are read back with the existing
// row-to-record helpers and handed to the caller, and the slot's
// confirmed_flush_lsn advances only to LSNs the caller confirms.

import (
	"context"
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
