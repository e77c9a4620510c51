package postgres

import (
	"context"
	"fmt"
	"iter"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Models lists, in byte order, the models whose meta tables exist: the
// tables of the current schema named TablePrefix + MetaTable with
// "{model}" standing for a valid model name, that have the meta columns
// resource_id, data and updated_time, so that `replicator reconcile
// --prune` can walk everything the sink holds. Discovery is by name only:
// without a prefix, "{model}_meta" also matches the meta tables of other
// prefixes (the caller decides what to do with a model it does not know).
// A template without "{model}" names no model, and is an error.
func (p *Sink) Models(ctx context.Context) ([]string, error) {
	if err := p.check(ctx); err != nil {
		return nil, err
	}
	before, after, ok := strings.Cut(p.metaTmpl, "{model}")
	if !ok {
		return nil, store.Invalidf(fmt.Sprintf("meta table %q", p.opts.TablePrefix+p.metaTmpl),
			"the template has no {model}, so the table does not say which model it holds")
	}
	re := regexp.MustCompile("^" + regexp.QuoteMeta(p.opts.TablePrefix+before) + "(.+)" + regexp.QuoteMeta(after) + "$")
	rows, err := p.pool.Query(ctx, `SELECT c.relname::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
		  AND (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		       AND a.attname IN ('resource_id', 'data', 'updated_time')) = 3`)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres: list meta tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sink: postgres: list meta tables: %w", err)
	}
	var models []string
	for _, n := range names {
		m := re.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		// The model must name this very table (a valid model name, and the
		// template applied to it gives the table back).
		if table, err := p.metaTable(m[1]); err == nil && table == n {
			models = append(models, m[1])
		}
	}
	slices.Sort(models)
	return slices.Compact(models), nil
}

// ResourceIDs yields, in byte order (ORDER BY resource_id COLLATE "C"), the
// resource ids of model's meta table (none if the table does not exist),
// so that resources only the sink holds can be found. The ids are fetched
// listPage at a time from a cursor in one READ ONLY, REPEATABLE READ
// transaction: one consistent snapshot, memory bounded by the page, and
// one sort on the server (keyset paging on COLLATE "C" could not use the
// primary key's index, whose collation is the database's, and would scan
// the whole table for every page). The transaction's connection is held
// while the ids are yielded: the pool needs a second one for the caller's
// own queries.
func (p *Sink) ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := p.check(ctx); err != nil {
			yield("", err)
			return
		}
		table, err := p.metaTable(model)
		if err != nil {
			yield("", err)
			return
		}
		if err := p.listIDs(ctx, table, yield); err != nil {
			yield("", fmt.Errorf("sink: postgres: list %s: %w", table, err))
		}
	}
}

// listIDs runs the cursor of ResourceIDs; a missing table yields nothing.
func (p *Sink) listIDs(ctx context.Context, table string, yield func(string, error) bool) error {
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	_, err = tx.Exec(ctx, "DECLARE specstar_ids NO SCROLL CURSOR FOR SELECT resource_id FROM "+
		pgx.Identifier{table}.Sanitize()+` ORDER BY resource_id COLLATE "C"`)
	if pgUndefined(err) {
		return nil
	}
	if err != nil {
		return err
	}
	fetch := fmt.Sprintf("FETCH FORWARD %d FROM specstar_ids", store.ListPage)
	for {
		rows, err := tx.Query(ctx, fetch)
		if err != nil {
			return err
		}
		page, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range page {
			if !yield(id, nil) {
				return nil
			}
		}
		if len(page) < store.ListPage {
			return tx.Commit(ctx)
		}
	}
}

// AllRevisions yields every row of the resource_index table (none without
// revisions=true, or when the table does not exist), with Model "": the
// resource tables are shared by all models. One query, its rows read as
// they come: the connection is held while they are yielded.
func (p *Sink) AllRevisions(ctx context.Context) iter.Seq2[store.RevisionRef, error] {
	return func(yield func(store.RevisionRef, error) bool) {
		if err := p.check(ctx); err != nil {
			yield(store.RevisionRef{}, err)
			return
		}
		if !p.opts.Revisions {
			return
		}
		rows, err := p.pool.Query(ctx, "SELECT resource_id, revision_id, schema_version FROM "+pgx.Identifier{p.indexTable}.Sanitize())
		if err == nil {
			defer rows.Close()
			for rows.Next() {
				var ref store.RevisionRef
				var sv string
				if err := rows.Scan(&ref.ResourceID, &ref.RevisionID, &sv); err != nil {
					yield(store.RevisionRef{}, fmt.Errorf("sink: postgres: list %s: %w", p.indexTable, err))
					return
				}
				if sv != pgNoneSchema {
					ref.SchemaVersion = events.Some(sv)
				}
				if !yield(ref, nil) {
					return
				}
			}
			err = rows.Err()
		}
		if err != nil && !pgUndefined(err) {
			yield(store.RevisionRef{}, fmt.Errorf("sink: postgres: list %s: %w", p.indexTable, err))
		}
	}
}
