package publish

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pglogrepl"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/postgres"
)

// Tail modes.
const (
	ModeAuto    = "auto"    // logical where the server allows it, else poll
	ModeLogical = "logical" // a replication slot and a publication (pgoutput)
	ModePoll    = "poll"    // keyset polling on updated_time
)

// TailOptions choose how Tail follows the deployment.
type TailOptions struct {
	// Mode is ModeAuto, ModeLogical or ModePoll.
	Mode string
	// Interval, Overlap and PurgeCheck configure polling (see
	// postgres.PollOptions).
	Interval, Overlap, PurgeCheck time.Duration
	// Logical names the slot and publication of logical replication.
	Logical postgres.LogicalOptions
}

// Tail publishes a snapshot if none was completed, then every change as
// it happens, until ctx ends: by logical replication, or by polling, as
// o.Mode says (ModeAuto: logical where the server allows it). It is a
// service: losing Postgres (a restart, a failover) or the stream is waited
// out with backoff, resuming from the stored position; a condition no
// wait changes (postgres.IsPermanent: wal_level not logical, no
// REPLICATION attribute, a missing meta table) stops it. It returns the
// mode it used and the error that stopped it (ctx's when interrupted),
// after storing the position.
func (p *Postgres) Tail(ctx context.Context, o TailOptions) (mode string, err error) {
	mode = o.Mode
	switch mode {
	case ModeAuto:
		if why, ok := postgres.LogicalAvailable(ctx, p.dsn); ok {
			mode = ModeLogical
		} else {
			mode = ModePoll
			p.log.Info("following changes by polling instead of logical replication", "why", why)
		}
	case ModeLogical, ModePoll:
	default:
		return mode, fmt.Errorf("tail mode %q (want auto, logical or poll)", mode)
	}
	streaming := func(on bool) {
		if p.hooks.Streaming != nil {
			p.hooks.Streaming(on)
		}
	}
	bo := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(0), backoff.WithMaxInterval(30*time.Second))
	for {
		// Each attempt resumes from the stored position: revisions emitted
		// after it may not have reached the stream, so none is skipped as
		// already emitted.
		p.src.ForgetEmitted()
		started := time.Now()
		streaming(true)
		if mode == ModeLogical {
			err = p.tailLogical(ctx, p.dsn, o.Logical)
		} else {
			err = p.tailPoll(ctx, postgres.PollOptions{Interval: o.Interval, Overlap: o.Overlap, PurgeCheck: o.PurgeCheck, NoTables: p.warnNoTables()})
		}
		streaming(false)
		if ctx.Err() != nil {
			break
		}
		if postgres.IsPermanent(err) {
			p.log.Error("tail stopped: waiting cannot fix this", "mode", mode, "err", err)
			break
		}
		if serr := p.Save(context.WithoutCancel(ctx)); serr != nil {
			p.log.Warn("could not store the position", "err", serr)
		}
		if time.Since(started) > time.Minute {
			bo.Reset() // it ran well for a while: this is a new failure, not the same one
		}
		wait := bo.NextBackOff()
		if p.hooks.Restarted != nil {
			p.hooks.Restarted()
		}
		p.log.Warn("tail stopped; starting again", "in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if ctx.Err() != nil {
			break
		}
	}
	if serr := p.Save(context.WithoutCancel(ctx)); serr != nil {
		return mode, fmt.Errorf("store position: %w", serr)
	}
	return mode, err
}

func (p *Postgres) tailPoll(ctx context.Context, o postgres.PollOptions) error {
	if !p.State.SnapshotDone {
		p.log.Info("no completed snapshot of this source: taking one first")
		if _, err := p.Snapshot(ctx); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	p.log.Info("following changes by polling", "interval", o.Interval.String(), "overlap", o.Overlap.String(), "purge_check", o.PurgeCheck.String())
	last := time.Now()
	return p.src.Poll(ctx, *p.State.Cursor, o, func(model string, rec events.Record, cur postgres.Cursor) error {
		if err := p.Publish(ctx, model, rec); err != nil {
			return err
		}
		c := cur.Clone()
		p.State.Cursor = &c
		if time.Since(last) > time.Second {
			last = time.Now()
			return p.Save(ctx)
		}
		return nil
	})
}

// warnNoTables is a PollOptions.NoTables that warns at once and then
// every minute while the source has no meta table: otherwise a tail of
// the wrong table_prefix, or of a database SpecStar has not written yet,
// polls forever publishing nothing, without a word.
func (p *Postgres) warnNoTables() func() {
	var last time.Time
	return func() {
		if !last.IsZero() && time.Since(last) < time.Minute {
			return
		}
		last = time.Now()
		p.log.Warn("no SpecStar meta tables found in this database: nothing to publish until they exist (check --from's database and table_prefix); polling on")
	}
}

// tailLogical follows the replication slot. The snapshot, when one is
// needed, is read at the slot's exported snapshot, so nothing between the
// two is missed; an LSN is confirmed to Postgres only once every event up
// to it is acknowledged by JetStream, and stored for the next run.
func (p *Postgres) tailLogical(ctx context.Context, dsn string, o postgres.LogicalOptions) error {
	start, err := p.src.SetupLogical(ctx, dsn, o)
	if err != nil {
		return err
	}
	startLSN := start.LSN
	o.Slot = start.Slot // the one SetupLogical chose for this database
	switch {
	case start.Created:
		// A new slot: the stream starts after its snapshot, which must be
		// published whole (a snapshot taken before the slot existed could
		// miss what changed in between).
		p.log.Info("created replication slot; publishing the snapshot it exported", "slot", start.Slot, "lsn", start.LSN.String())
		p.State = PostgresState{}
		st, err := p.src.SnapshotAt(ctx, start.SnapshotName, postgres.Position{}, func(model string, rec events.Record, pos postgres.Position) error {
			return p.Publish(ctx, model, rec)
		})
		start.Close()
		if err != nil {
			return fmt.Errorf("snapshot at the slot's start: %w", err)
		}
		cur := st.Cursor.Clone()
		p.State = PostgresState{Snapshot: st.End, SnapshotDone: true, Cursor: &cur, TxSnapshot: st.TxSnapshot, LSN: start.LSN.String()}
		if err := p.Save(ctx); err != nil {
			return err
		}
	default:
		start.Close()
		if !p.State.SnapshotDone {
			// The slot exists but no snapshot was completed: read one now
			// and replay the slot from its position (the overlap is re-sent
			// and the sinks make it a no-op).
			p.log.Info("replication slot exists but no snapshot was completed: taking one", "slot", start.Slot)
			if _, err := p.Snapshot(ctx); err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
		}
		stored, err := pglogrepl.ParseLSN(p.State.LSN)
		switch {
		case err != nil:
		case stored > startLSN:
			startLSN = stored
		case stored < startLSN && p.State.SnapshotDone:
			if err := p.resnapshot(ctx, start.Slot, stored, startLSN); err != nil {
				return err
			}
		}
	}
	// confirmed is the LSN last stored in the positions bucket: only it is
	// confirmed to Postgres, so that a slot past the stored position means
	// the bus lost what it had acknowledged (see resnapshot).
	var confirmed atomic.Uint64
	confirmed.Store(uint64(startLSN))
	lastSave, lastLag := time.Now(), time.Time{}
	save := func() error {
		lsn, err := pglogrepl.ParseLSN(p.State.LSN)
		if err != nil {
			return fmt.Errorf("position %q: %w", p.State.LSN, err)
		}
		lastSave = time.Now()
		if err := p.Save(ctx); err != nil {
			return err
		}
		confirmed.Store(uint64(lsn))
		if p.hooks.ConfirmedLSN != nil {
			p.hooks.ConfirmedLSN(lsn)
		}
		return nil
	}
	if p.State.LSN == "" {
		p.State.LSN = startLSN.String()
	}
	p.log.Info("following changes by logical replication", "slot", o.Slot, "from_lsn", startLSN.String())
	return p.src.StreamLogical(ctx, dsn, o, startLSN, postgres.LogicalHandler{
		Record: func(model string, rec events.Record, _ pglogrepl.LSN) error {
			return p.Publish(ctx, model, rec)
		},
		Purge: func(model, resourceID string, _ pglogrepl.LSN, committed time.Time) error {
			// The delete's commit time: a re-creation is newer than it.
			return p.Publish(ctx, model, &events.PurgeRecord{ResourceID: resourceID, PurgedTime: events.Time{Time: committed.UTC()}})
		},
		Commit: func(lsn pglogrepl.LSN) error {
			if err := p.Flush(ctx); err != nil {
				return err
			}
			p.State.LSN = lsn.String()
			if time.Since(lastSave) > time.Second {
				if err := save(); err != nil {
					return err
				}
			}
			if time.Since(lastLag) > 15*time.Second {
				lastLag = time.Now()
				if lag, err := postgres.SlotLag(ctx, dsn, o); err == nil {
					if p.hooks.SlotLag != nil {
						p.hooks.SlotLag(lag)
					}
					p.log.Info("replication slot", "slot", o.Slot, "retained_wal_bytes", lag, "confirmed_lsn", lsn.String())
				}
			}
			return nil
		},
		Idle: func() error {
			if p.State.LSN == pglogrepl.LSN(confirmed.Load()).String() || time.Since(lastSave) < idleSave {
				return nil
			}
			return save()
		},
		Confirmed: func() pglogrepl.LSN { return pglogrepl.LSN(confirmed.Load()) },
	})
}

// idleSave is how soon after the last one a logical tail stores (and
// then confirms) its position when the stream is between transactions;
// under load it stores every second, from Commit.
const idleSave = 200 * time.Millisecond

// resnapshot publishes the deployment's whole current state again when
// the replication slot is past the position last stored in the positions
// bucket. The tail stores a position before it confirms it to Postgres,
// so that can only mean the bus lost acknowledged writes (a power cut of
// servers that did not fsync, as nats-server does not by default, loses
// the stream's newest events and the bucket's newest positions together)
// or the bucket was replaced: the changes the slot has moved past may be
// missing from the stream, and no slot can go back. The snapshot puts
// every resource's revisions on the stream again (the sinks take what
// they hold as duplicates); deletes in the lost window are not events of
// a snapshot, and `replicator reconcile --prune` finds what they leave.
func (p *Postgres) resnapshot(ctx context.Context, slot string, stored, slotLSN pglogrepl.LSN) error {
	p.log.Warn("the replication slot is past the last stored position: the bus lost events it had acknowledged (or its positions bucket was replaced); publishing the whole deployment again",
		"slot", slot, "slot_lsn", slotLSN.String(), "stored_lsn", stored.String())
	if p.hooks.Resnapshot != nil {
		p.hooks.Resnapshot()
	}
	p.State = PostgresState{}
	if _, err := p.Snapshot(ctx); err != nil {
		return fmt.Errorf("snapshot after the bus lost events: %w", err)
	}
	p.State.LSN = slotLSN.String()
	return p.Save(ctx)
}
