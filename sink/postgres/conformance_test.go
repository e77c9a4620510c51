package postgres_test

import (
	"context"
	"testing"

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
	}
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
