package redis_test

import (
	"fmt"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
)

// BenchmarkFlush measures a batch of 256 new metas (the replicator's
// default batch) applied and flushed: one GET and one EVALSHA each, so a
// batch costs 512 round trips to the server.
func BenchmarkFlush(b *testing.B) {
	st := openStore(b, "", events.JSON)
	const batch = 256
	n := 0
	for b.Loop() {
		for range batch {
			n++
			m := sinktestutil.Meta(b, fmt.Sprintf("bench:%d", n), "2024-05-01T00:00:00Z", 1, "a")
			if _, err := st.ApplyMeta(ctx, "issue", m); err != nil {
				b.Fatal(err)
			}
		}
		if err := st.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "metas/s")
}
