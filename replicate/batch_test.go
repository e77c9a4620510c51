package replicate

import "testing"

// TestBatchAfter: batches double while a backlog waits, within MaxBatch,
// MaxAckPending and MaxBatchBytes, and fall back to Batch when the backlog
// is gone or growth is off.
func TestBatchAfter(t *testing.T) {
	d := Config{Batch: 256, MaxBatch: 2048, MaxBatchBytes: 32 << 20, MaxAckPending: 4096}
	cases := []struct {
		name      string
		c         Config
		size, got int
		pending   uint64
		bytes     int64
		want      int
	}{
		{"full batch, backlog waits: doubles", d, 256, 256, 10000, 256 << 10, 512},
		{"grows up to MaxBatch", d, 2048, 2048, 10000, 2 << 20, 2048},
		{"from below MaxBatch, stops at it", d, 1500, 1500, 10000, 1500 << 10, 2048},
		{"nothing pending: back to Batch", d, 2048, 2048, 0, 2 << 20, 256},
		{"batch not full: back to Batch", d, 1024, 700, 5, 700 << 10, 256},
		{"MaxAckPending bounds it", Config{Batch: 256, MaxBatch: 8192, MaxAckPending: 1000}, 1024, 1024, 9, 1 << 20, 1000},
		{"MaxBatchBytes bounds it (64 KiB events: 32 MiB holds 512)", Config{Batch: 100, MaxBatch: 4096, MaxBatchBytes: 32 << 20}, 1024, 1024, 9, 1024 << 16, 512},
		{"MaxBatchBytes below Batch: Batch", Config{Batch: 256, MaxBatch: 4096, MaxBatchBytes: 1 << 20}, 256, 256, 9, 256 << 16, 256},
		{"growth off (MaxBatch 0)", Config{Batch: 256}, 256, 256, 9, 1 << 10, 256},
		{"growth off (MaxBatch below Batch)", Config{Batch: 256, MaxBatch: 100}, 256, 256, 9, 1 << 10, 256},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := batchAfter(c.c, c.size, c.got, c.pending, c.bytes); got != c.want {
				t.Errorf("batchAfter(size %d, got %d, pending %d, %d bytes) = %d, want %d", c.size, c.got, c.pending, c.bytes, got, c.want)
			}
		})
	}
}
