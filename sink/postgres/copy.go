package postgres

// Large batches: written by COPY into staging tables (or straight into
// the tables for rows that must not exist yet) and set-based statements.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgCopyFrom is the number of changed rows from which a round writes
// through COPY into temporary staging tables and set-based statements
// rather than one upsert per row: COPY costs a few more round trips but
// far less per row (see BenchmarkPostgresFlush).
const pgCopyFrom = 1000

// writeCopy writes the changes by COPY into this session's staging tables
// (pg_temp, emptied at commit), then per table one UPDATE ... FROM joined
// on the key and the previous content (the compare-and-swap) and one
// INSERT ... SELECT ... ON CONFLICT DO NOTHING for new rows. It returns how
// many rows were written by neither.
func (p *Sink) writeCopy(ctx context.Context, tx pgx.Tx, ch *pgChanges, read bool) (int, error) {
	if fresh, rest := ch.split(); fresh.len() > 0 {
		ok, err := p.copyFresh(ctx, tx, &fresh, read)
		if err != nil {
			return 0, err
		}
		if ok {
			if rest.len() == 0 {
				return 0, nil
			}
			ch = &rest
		}
	}
	if _, err := tx.Exec(ctx, pgStageDDL); err != nil {
		return 0, fmt.Errorf("sink: postgres staging tables: %w", err)
	}
	copyRows := func(table string, cols []string, rows [][]any) error {
		if len(rows) == 0 {
			return nil
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", table}, cols, pgx.CopyFromRows(rows))
		if err != nil {
			return fmt.Errorf("sink: postgres copy into %s: %w", table, err)
		}
		return nil
	}
	var tables []*pgMetaSQL
	metaRows := make([][]any, 0, len(ch.metas))
	for _, c := range ch.metas {
		if len(tables) == 0 || tables[len(tables)-1] != c.sql {
			tables = append(tables, c.sql)
		}
		metaRows = append(metaRows, append(append([]any{c.sql.table}, c.row...), pgPrev(c.prev)))
	}
	metaCols := []string{"tbl"}
	for _, c := range pgMetaTableSpec("").columns {
		metaCols = append(metaCols, c.name)
	}
	if err := copyRows("specstar_stage_meta", append(metaCols, "prev"), metaRows); err != nil {
		return 0, err
	}
	dataRows := make([][]any, 0, len(ch.datas))
	for _, c := range ch.datas {
		dataRows = append(dataRows, []any{c.uid, c.data, c.info, pgPrev(c.prevData), pgPrev(c.prevInfo)})
	}
	if err := copyRows("specstar_stage_data", []string{"uid", "data", "info", "prev_data", "prev_info"}, dataRows); err != nil {
		return 0, err
	}
	slotRows := make([][]any, 0, len(ch.slots))
	for _, c := range ch.slots {
		var prev any
		if c.prev != "" {
			prev = c.prev
		}
		slotRows = append(slotRows, []any{c.key.rid, c.key.revID, c.key.sv, c.uid, prev})
	}
	if err := copyRows("specstar_stage_slot", []string{"resource_id", "revision_id", "schema_version", "uid", "prev"}, slotRows); err != nil {
		return 0, err
	}
	written := int64(0)
	count := func(ct pgconn.CommandTag) error {
		written += ct.RowsAffected()
		return nil
	}
	b := &pgx.Batch{}
	for _, s := range tables {
		b.Queue(s.stagedUpdate, s.table).Exec(count)
		b.Queue(s.stagedInsert, s.table).Exec(count)
	}
	if len(ch.datas) > 0 {
		b.Queue(p.rev.stagedDataUpdate).Exec(count)
		b.Queue(p.rev.stagedDataInsert).Exec(count)
	}
	if len(ch.slots) > 0 {
		b.Queue(p.rev.stagedSlotUpdate).Exec(count)
		b.Queue(p.rev.stagedSlotInsert).Exec(count)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("sink: postgres write staged rows: %w", err)
	}
	return len(ch.metas) + len(ch.datas) + len(ch.slots) - int(written), nil
}

// pgUniqueViolation is Postgres's SQLSTATE for a duplicate key.
const pgUniqueViolation = "23505"

// errGuessedWrong is copyGuessed's report that a row it took for new
// exists: the transaction is aborted, and the Flush is done again,
// reading first.
var errGuessedWrong = errors.New("sink: postgres: a row taken for new exists")

// copyFresh writes rows that did not exist when read by COPY straight into
// their tables (metas, then resource_data, then resource_index, whose uid
// references it), as a plain bulk load does: the compare-and-swap of a new
// row is "insert only if there is still no row", which a COPY into a
// table with that primary key is. If another writer created one of the
// rows in between, the COPY fails on the key; everything it wrote is
// rolled back to a savepoint and copyFresh reports false, so that the
// caller writes the rows through the staging tables, whose INSERT ... ON
// CONFLICT DO NOTHING counts the row as missed and the next round decides
// it again. Without read (a round that read nothing: every row is taken
// for new), it is copyGuessed.
func (p *Sink) copyFresh(ctx context.Context, tx pgx.Tx, ch *pgChanges, read bool) (bool, error) {
	if !read {
		return true, p.copyGuessed(ctx, tx, ch)
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT specstar_copy"); err != nil {
		return false, fmt.Errorf("sink: postgres savepoint: %w", err)
	}
	table, failed := p.copyInto(ctx, tx, ch)
	var pgErr *pgconn.PgError
	switch {
	case failed == nil:
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT specstar_copy"); err != nil {
			return false, fmt.Errorf("sink: postgres release savepoint: %w", err)
		}
		return true, nil
	case errors.As(failed, &pgErr) && pgErr.Code == pgUniqueViolation:
		// another writer created one of the rows since the read
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT specstar_copy"); err != nil {
			return false, fmt.Errorf("sink: postgres rollback to savepoint: %w", err)
		}
		return false, nil
	}
	return false, fmt.Errorf("sink: postgres copy into %s: %w", table, failed)
}

// copyGuessed is copyFresh for a round that read nothing, the first of
// its transaction: with no savepoint (a subtransaction and two round
// trips less per batch), a row that exists after all fails the COPY and
// aborts the transaction, which is reported as errGuessedWrong; nothing
// was written, and the Flush starts again, reading first.
func (p *Sink) copyGuessed(ctx context.Context, tx pgx.Tx, ch *pgChanges) error {
	table, err := p.copyInto(ctx, tx, ch)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation:
		return errGuessedWrong
	}
	return fmt.Errorf("sink: postgres copy into %s: %w", table, err)
}

// copyInto COPYs the changes' rows into their tables: metas, then
// resource_data, then resource_index (whose uid references it). It
// returns the table a COPY failed on, with the error.
func (p *Sink) copyInto(ctx context.Context, tx pgx.Tx, ch *pgChanges) (string, error) {
	copyRows := func(table string, cols []string, rows [][]any) error {
		n, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows))
		if err == nil && n != int64(len(rows)) {
			err = fmt.Errorf("copied %d rows of %d", n, len(rows))
		}
		return err
	}
	var metaCols []string
	for _, c := range pgMetaTableSpec("").columns {
		metaCols = append(metaCols, c.name)
	}
	for i := 0; i < len(ch.metas); {
		s := ch.metas[i].sql
		var rows [][]any
		for ; i < len(ch.metas) && ch.metas[i].sql == s; i++ {
			rows = append(rows, ch.metas[i].row)
		}
		if err := copyRows(s.table, metaCols, rows); err != nil {
			return s.table, err
		}
	}
	if len(ch.datas) > 0 {
		rows := make([][]any, len(ch.datas))
		for i, c := range ch.datas {
			rows[i] = []any{c.uid, c.data, c.info}
		}
		if err := copyRows(p.dataTable, []string{"uid", "data", "info"}, rows); err != nil {
			return p.dataTable, err
		}
	}
	if len(ch.slots) > 0 {
		rows := make([][]any, len(ch.slots))
		for i, c := range ch.slots {
			rows[i] = []any{c.key.rid, c.key.revID, c.key.sv, c.uid}
		}
		if err := copyRows(p.indexTable, []string{"resource_id", "revision_id", "schema_version", "uid"}, rows); err != nil {
			return p.indexTable, err
		}
	}
	return "", nil
}
