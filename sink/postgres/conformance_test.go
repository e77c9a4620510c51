package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/postgres"
	"github.com/specstar/replicator/sink/sinktest"
)

// TestConformance runs the sink conformance suite against the Postgres
// sink with revisions, each Open on a fresh table prefix dropped at the
// end. (An external test package: the root sink package, which the suite
// uses, imports this one.)
func TestConformance(t *testing.T) {
	sinktest.Run(t, PostgresBackend())
}

// TestConformanceCopy runs the suite with every Flush written by COPY,
// as a batch of thousands of rows is (and, while the sink is fresh,
// decided without reading first), so that the replicas and uid cases
// hold for that way of writing too. No crash case: a reopened sink
// would write by upserts again.
func TestConformanceCopy(t *testing.T) {
	b := PostgresBackend()
	open := b.Open
	b.Open = func(t *testing.T) sink.Sink {
		s := open(t)
		s.(*postgres.Sink).CopyAlways()
		return s
	}
	b.Reopen = nil
	sinktest.Run(t, b)
}

// PostgresBackend is the Postgres sink storing metas and revisions, for
// this package's conformance run and the layered one.
func PostgresBackend() sinktest.Backend {
	return sinktest.Backend{
		Open: func(t *testing.T) sink.Sink {
			return openPostgres(t, postgres.FreshPrefix(t))
		},
		Reopen: func(t *testing.T, s sink.Sink) sink.Sink {
			return openPostgres(t, s.(*postgres.Sink).Prefix())
		},
		Metas: true, Revisions: true,
		// Apply queues; Flush decides newer-wins in the database.
		Queued: true,
		// SpecStar's resource tables are shared by a prefix's models.
		RevisionsAcrossModels: true,
		Dump: func(t *testing.T, s sink.Sink) string {
			return dumpTables(t, s.(*postgres.Sink).Prefix())
		},
	}
}

// dumpTables lists every table of prefix in name order (named without
// the prefix) and each one's rows, every column, in the order of all
// their columns.
func dumpTables(t *testing.T, prefix string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.SharedDSN())
	if err != nil {
		t.Fatalf("connect to Postgres: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1) ORDER BY tablename`, prefix)
	if err != nil {
		t.Fatalf("list tables %s*: %v", prefix, err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("list tables %s*: %v", prefix, err)
	}
	var b strings.Builder
	for _, table := range tables {
		fmt.Fprintf(&b, "table %s\n", strings.TrimPrefix(table, prefix))
		rows, err := conn.Query(ctx, `SELECT * FROM `+pgx.Identifier{table}.Sanitize()+` AS r ORDER BY r::text COLLATE "C"`)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatalf("read %s: %v", table, err)
			}
			for i, f := range rows.FieldDescriptions() {
				fmt.Fprintf(&b, " %s=%#v", f.Name, vals[i])
			}
			b.WriteString("\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
	}
	return b.String()
}

func openPostgres(t *testing.T, prefix string) *postgres.Sink {
	t.Helper()
	p, err := postgres.Open(context.Background(), postgres.ServerDSN(), postgres.Options{TablePrefix: prefix, Revisions: true})
	if err != nil {
		t.Fatalf("cannot open the Postgres sink (set PG_DSN to a reachable server): %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
