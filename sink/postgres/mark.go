package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// marksTable names the table that holds one row per durable consumer that
// has written the sink (replicate.Marker): a sink whose tables were
// dropped has lost it, and the consumer's position is then not trusted.
// It has no meta columns, so Models never takes it for a model.
func (p *Sink) marksTable() string {
	return p.opts.TablePrefix + "specstar_replicator_marks"
}

// Marked reports whether consumer has marked this sink.
func (p *Sink) Marked(ctx context.Context, consumer string) (bool, error) {
	if err := p.check(ctx); err != nil {
		return false, err
	}
	var one int
	err := p.pool.QueryRow(ctx, `SELECT 1 FROM `+pgx.Identifier{p.marksTable()}.Sanitize()+
		` WHERE consumer = $1`, consumer).Scan(&one)
	switch {
	case err == nil:
		return true, nil
	case pgNotExist(err):
		return false, nil
	}
	return false, fmt.Errorf("sink: postgres: mark of consumer %s in %s: %w", consumer, p.marksTable(), err)
}

// Mark records, in a committed row, that consumer writes this sink.
func (p *Sink) Mark(ctx context.Context, consumer string) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	table := pgx.Identifier{p.marksTable()}.Sanitize()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sink: postgres: mark of consumer %s: begin: %w", consumer, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgDDLLock); err != nil {
		return fmt.Errorf("sink: postgres: mark of consumer %s: lock: %w", consumer, err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+
		` (consumer TEXT PRIMARY KEY, marked_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("sink: postgres: mark of consumer %s: create %s: %w", consumer, p.marksTable(), err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (consumer) VALUES ($1) ON CONFLICT DO NOTHING`, consumer); err != nil {
		return fmt.Errorf("sink: postgres: mark of consumer %s in %s: %w", consumer, p.marksTable(), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sink: postgres: mark of consumer %s: commit: %w", consumer, err)
	}
	return nil
}

// dropMarksIfNew forgets every consumer's mark when the resource tables
// are about to be created: the sink held none, so whatever a consumer had
// written to it is gone (the marks table alone survived a DROP of the
// others). Called before pgEnsureResourceTables.
func (p *Sink) dropMarksIfNew(ctx context.Context) error {
	var missing bool
	if err := p.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, pgx.Identifier{p.dataTable}.Sanitize()).Scan(&missing); err != nil {
		return fmt.Errorf("sink: postgres: look for %s: %w", p.dataTable, err)
	}
	if !missing {
		return nil
	}
	_, err := p.pool.Exec(ctx, `DELETE FROM `+pgx.Identifier{p.marksTable()}.Sanitize())
	if err != nil && !pgUndefined(err) {
		return fmt.Errorf("sink: postgres: forget the marks of %s, whose resource tables are gone: %w", p.marksTable(), err)
	}
	return nil
}
