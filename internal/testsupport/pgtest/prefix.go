package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// SharedDSN is the shared test server's DSN: $PG_DSN, else the machine's
// cluster on 127.0.0.1:5432 (database test), as .ci/run sets it.
func SharedDSN() string {
	if dsn := os.Getenv("PG_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Prefix returns a fresh table prefix (t_<random>_) on the shared server,
// whose tables are dropped when the test ends, so that tests sharing the
// server never see each other's rows.
func Prefix(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "t_" + hex.EncodeToString(b[:]) + "_"
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, SharedDSN())
		if err != nil {
			t.Errorf("cleanup of tables %s*: %v", prefix, err)
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1)`, prefix)
		if err != nil {
			t.Errorf("cleanup of tables %s*: %v", prefix, err)
			return
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("cleanup of tables %s*: %v", prefix, err)
			return
		}
		for _, name := range names {
			if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
				t.Errorf("cleanup: drop %s: %v", name, err)
			}
		}
	})
	return prefix
}
