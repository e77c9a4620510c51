package redis_test

import (
	"fmt"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
)

// BenchmarkFlush measures a batch of 256 new metas (the replicator's
// default batch) written by Put one at a time (the baseline: one GET and
// one EVALSHA each, 512 round trips) and by ApplyMeta and Flush (one
// MGET and one pipeline of EVALSHA).
func BenchmarkFlush(b *testing.B) {
	const batch = 256
	for _, mode := range []string{"put", "flush"} {
		b.Run(mode, func(b *testing.B) {
			st := openStore(b, "", events.JSON)
			n := 0
			for b.Loop() {
				for range batch {
					n++
					m := sinktestutil.Meta(b, fmt.Sprintf("bench:%d", n), "2024-05-01T00:00:00Z", 1, "a")
					var err error
					if mode == "put" {
						_, err = st.Put(ctx, "issue", m)
					} else {
						_, err = st.ApplyMeta(ctx, "issue", m)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if err := st.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "metas/s")
		})
	}
}
