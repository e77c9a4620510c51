package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/postgres"
	"github.com/specstar/replicator/stream"
)

// PostgresState is what a Postgres publisher keeps in the positions
// bucket, so that a snapshot resumes and a tail continues where the
// previous run stopped.
type PostgresState struct {
	Snapshot     postgres.Position `json:"snapshot"`              // progress of the snapshot
	SnapshotDone bool              `json:"snapshot_done"`         // the whole snapshot is on the stream
	Cursor       *postgres.Cursor  `json:"cursor,omitempty"`      // where the tail continues
	Updated      time.Time         `json:"updated,omitzero"`      // when this was saved
	TxSnapshot   string            `json:"tx_snapshot,omitempty"` // the snapshot's pg_current_snapshot()
	LSN          string            `json:"lsn,omitempty"`         // logical mode: everything up to here is on the stream
}

// Postgres couples a Postgres deployment with the stream and the stored
// position of that deployment; it exists to publish a live deployment
// (Snapshot, then Tail) so that a restart neither loses nor repeats much.
type Postgres struct {
	*Publisher
	// State is the stored position (loaded by OpenPostgres).
	State PostgresState
	src   *postgres.Source
	dsn   string
	kv    jetstream.KeyValue
	key   string
	log   *slog.Logger
	hooks Hooks
}

// OpenPostgres prepares publishing d onto bus (at most inflight events
// awaiting their acknowledgement) and loads its stored position. The
// caller keeps d and bus open as long as it uses the publisher.
func OpenPostgres(ctx context.Context, d *postgres.Deployment, bus *stream.Bus, inflight int, log *slog.Logger, hooks Hooks) (*Postgres, error) {
	kv, err := bus.Positions(ctx)
	if err != nil {
		return nil, err
	}
	h := xxh3.HashString128(d.ID()).Bytes()
	p := &Postgres{Publisher: NewPublisher(bus, inflight, d.Blobs, log, hooks), src: d.Source, dsn: d.DSN, kv: kv,
		key: fmt.Sprintf("pg-%x", h[:8]), log: log, hooks: hooks}
	if e, err := kv.Get(ctx, p.key); err == nil {
		if err := json.Unmarshal(e.Value(), &p.State); err != nil {
			return nil, fmt.Errorf("stored position %s: %w", p.key, err)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("stored position %s: %w", p.key, err)
	}
	return p, nil
}

// Save waits for every event published so far to be acknowledged, then
// stores the position: the stored position never runs ahead of the
// stream.
func (p *Postgres) Save(ctx context.Context) error {
	if err := p.Flush(ctx); err != nil {
		return err
	}
	p.State.Updated = time.Now().UTC()
	b, err := json.Marshal(p.State)
	if err != nil {
		return err
	}
	if _, err := p.kv.Put(ctx, p.key, b); err != nil {
		return fmt.Errorf("store position %s: %w", p.key, err)
	}
	return nil
}

// Snapshot publishes the deployment's current state, resuming a snapshot
// that was interrupted; the position is stored as it goes, and kept on
// failure so that the next run resumes after what was published.
func (p *Postgres) Snapshot(ctx context.Context) (postgres.SnapshotStats, error) {
	if p.State.Snapshot.Model != "" {
		p.log.Info("resuming the snapshot", "after_model", p.State.Snapshot.Model, "after_resource", p.State.Snapshot.ResourceID)
	}
	last := time.Now()
	st, err := p.src.Snapshot(ctx, p.State.Snapshot, func(model string, rec events.Record, pos postgres.Position) error {
		if err := p.Publish(ctx, model, rec); err != nil {
			return err
		}
		p.State.Snapshot = pos
		if time.Since(last) > time.Second {
			last = time.Now()
			return p.Save(ctx)
		}
		return nil
	})
	if err != nil {
		// Keep what was published: the next run resumes after it.
		if serr := p.Save(context.WithoutCancel(ctx)); serr != nil {
			p.log.Warn("could not store the snapshot position", "err", serr)
		}
		return st, err
	}
	cur := st.Cursor.Clone()
	p.State = PostgresState{Snapshot: st.End, SnapshotDone: true, Cursor: &cur, TxSnapshot: st.TxSnapshot}
	return st, p.Save(ctx)
}

// DropSlot drops the replication slot and publication of o and forgets
// the logical position, returning the slot's name; it exists for slot
// hygiene (see postgres.DropLogical).
func (p *Postgres) DropSlot(ctx context.Context, o postgres.LogicalOptions) (string, error) {
	slot, err := postgres.DropLogical(ctx, p.dsn, o)
	if err != nil {
		return "", err
	}
	p.State.LSN = ""
	return slot, p.Save(ctx)
}
