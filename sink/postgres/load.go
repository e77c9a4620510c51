package postgres

// Reading a batch's current rows, in as few queries as their count allows.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// read reads the rows the queue touches into the round's states: meta
// rows, index rows and data rows in one batch (which begins the
// transaction if *tx is nil), then, FOR SHARE, the data rows of the other
// uids that index rows name.
func (p *Sink) read(ctx context.Context, tx *pgx.Tx, pending []pgWrite, metas map[pgMetaKey]*pgMetaState,
	slots map[pgSlotKey]*pgSlotState, datas map[string]*pgDataState, byTable map[string][]string,
	tableSQL map[string]*pgMetaSQL, purgeRids map[string]bool) error {
	scanData := func(rows pgx.Rows) error {
		for rows.Next() {
			var uid string
			var data, info []byte
			if err := rows.Scan(&uid, &data, &info); err != nil {
				return err
			}
			if st := datas[uid]; st != nil {
				st.origData, st.origInfo = data, info
			}
		}
		return rows.Err()
	}
	b := &pgx.Batch{}
	if *tx == nil {
		b.BeginTx(pgx.TxOptions{})
	}
	for _, table := range pgSortedKeys(byTable) {
		b.Queue(tableSQL[table].selectMany, byTable[table]).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var rid string
				var data []byte
				if err := rows.Scan(&rid, &data); err != nil {
					return err
				}
				if st := metas[pgMetaKey{table, rid}]; st != nil {
					st.orig = data
				}
			}
			return rows.Err()
		})
	}
	if len(slots) > 0 {
		var rids, revs, svs []string
		for k := range slots {
			rids, revs, svs = append(rids, k.rid), append(revs, k.revID), append(svs, k.sv)
		}
		b.Queue(p.rev.selectSlots, rids, revs, svs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k pgSlotKey
				var uid string
				if err := rows.Scan(&k.rid, &k.revID, &k.sv, &uid); err != nil {
					return err
				}
				if st := slots[k]; st != nil {
					st.orig = uid
				}
			}
			return rows.Err()
		})
		b.Queue(p.rev.selectData, pgSortedKeys(datas)).Query(scanData)
	}
	if len(purgeRids) > 0 {
		b.Queue(p.pgPurgeSlotsSQL(), pgSortedKeys(purgeRids)).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k pgSlotKey
				var uid string
				if err := rows.Scan(&k.rid, &k.revID, &k.sv, &uid); err != nil {
					return err
				}
				st := slots[k]
				if st == nil {
					st = &pgSlotState{}
					slots[k] = st
				}
				st.orig = uid
			}
			return rows.Err()
		})
	}
	var err error
	if *tx == nil {
		br := p.pool.SendBatch(ctx, b)
		*tx = br.Tx()
		err = br.Close()
	} else {
		err = (*tx).SendBatch(ctx, b).Close()
	}
	if err != nil {
		return fmt.Errorf("sink: postgres read rows: %w", err)
	}

	// Read again, FOR SHARE, the data rows of the other uids that index
	// rows name.
	others := map[string]bool{}
	for k, st := range slots {
		// the data rows a purge may remove, and orders revisions by
		if purgeRids[k.rid] && st.orig != "" && (datas[st.orig] == nil || datas[st.orig].origInfo == nil) {
			others[st.orig] = true
			if datas[st.orig] == nil {
				datas[st.orig] = &pgDataState{}
			}
		}
	}
	for _, w := range pending {
		if w.rev != nil {
			if cur := slots[w.rev.slot].orig; cur != "" && cur != w.rev.info.UID {
				others[cur] = true
				if datas[cur] == nil {
					datas[cur] = &pgDataState{}
				}
			}
		}
	}
	if len(others) > 0 {
		err := pgQuery(ctx, *tx, p.rev.selectDataShared, []any{pgSortedKeys(others)}, func(rows pgx.Rows) error {
			var uid string
			var data, info []byte
			if err := rows.Scan(&uid, &data, &info); err != nil {
				return err
			}
			if st := datas[uid]; st != nil {
				st.origData, st.origInfo = data, info
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("sink: postgres read %s: %w", p.dataTable, err)
		}
	}

	return nil
}

// pgNoneRead reports whether a round's read found none of its rows.
func pgNoneRead(metas map[pgMetaKey]*pgMetaState, slots map[pgSlotKey]*pgSlotState, datas map[string]*pgDataState) bool {
	for _, st := range metas {
		if st.orig != nil {
			return false
		}
	}
	for _, st := range slots {
		if st.orig != "" {
			return false
		}
	}
	for _, st := range datas {
		if st.origInfo != nil {
			return false
		}
	}
	return true
}

// pgQuery runs a query and calls fn for each row.
func pgQuery(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args []any, fn func(pgx.Rows) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func pgSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func pgSortedSlotKeys(m map[pgSlotKey]*pgSlotState) []pgSlotKey {
	keys := make([]pgSlotKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b pgSlotKey) int {
		if c := strings.Compare(a.rid, b.rid); c != 0 {
			return c
		}
		if c := strings.Compare(a.revID, b.revID); c != 0 {
			return c
		}
		return strings.Compare(a.sv, b.sv)
	})
	return keys
}
