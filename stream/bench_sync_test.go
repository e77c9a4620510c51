package stream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
)

// BenchmarkPublishSync measures what fsync before every acknowledgement
// (the embedded server's default, SyncInterval 0) costs against
// nats-server's own two-minute flush, for a replay's window of 512
// unacknowledged events and for one event at a time. Run it alone, on
// the disk the data directory would use: the figure is the disk's fsync.
func BenchmarkPublishSync(b *testing.B) {
	payload := make([]byte, 1024)
	for _, inflight := range []int{512, 1} {
		for _, sync := range []time.Duration{0, 2 * time.Minute} {
			name := "always"
			if sync > 0 {
				name = sync.String()
			}
			b.Run(fmt.Sprintf("sync=%s/inflight=%d", name, inflight), func(b *testing.B) {
				ctx := context.Background()
				bus, err := Open(ctx, Config{DataDir: b.TempDir(), SyncInterval: sync}, slog.New(slog.NewTextHandler(io.Discard, nil)))
				if err != nil {
					b.Fatal(err)
				}
				defer bus.Close()
				pub := bus.NewPublisher(inflight)
				b.SetBytes(int64(len(payload)))
				b.ResetTimer()
				for i := range b.N {
					id := fmt.Sprintf("blob-%d", i)
					env, err := events.EnvelopeFor(bus.Prefix(), "issue", &events.BlobRecord{FileID: id, BlobData: payload, Size: int64(len(payload))}, nil)
					if err != nil {
						b.Fatal(err)
					}
					if err := pub.Publish(ctx, env); err != nil {
						b.Fatal(err)
					}
				}
				if err := pub.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
