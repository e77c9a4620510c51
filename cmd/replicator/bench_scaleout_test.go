package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/acbak"
	srcarchive "github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

// BenchmarkPostgresScaleOut: the pipeline benchmarks' archive (100,000
// revisions, 10,000 metas) is put on an embedded JetStream stream once;
// then 1, 2 and 4 `replicator run --until-drained` processes (the built
// binary) share one Postgres sink's durable consumer and drain that
// backlog into new tables. It reports revisions/s and the speed-up over
// one process (x_vs_1, measured in the same run).
func BenchmarkPostgresScaleOut(b *testing.B) {
	archive, _ := benchInput(b)
	conn := benchPGConnect(b)
	defer conn.Close(context.Background())
	bin := buildReplicator(b)
	ctx := context.Background()
	bus, err := stream.Open(ctx, stream.Config{DataDir: b.TempDir()}, quietLog())
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	f, err := os.Open(archive)
	if err != nil {
		b.Fatal(err)
	}
	pub := bus.NewPublisher(512)
	_, err = srcarchive.Replay(ctx, f, acbak.Options{}, bus.Prefix(), bus.BlobBucket(), pub, nil)
	f.Close()
	if err == nil {
		err = pub.Flush(ctx)
	}
	if err != nil {
		b.Fatalf("replay %s: %v", archive, err)
	}
	var one float64 // revisions/s of one process
	for _, procs := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("processes=%d", procs), func(b *testing.B) {
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				prefix := benchPGPrefix()
				to := pgDSN() + pgSep() + "table_prefix=" + prefix + "&revisions=true"
				cmds := make([]*exec.Cmd, procs)
				outs := make([]*strings.Builder, procs)
				for i := range cmds {
					outs[i] = &strings.Builder{}
					cmds[i] = exec.Command(bin, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--to", to)
					cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
				}
				b.StartTimer()
				start := time.Now()
				for _, c := range cmds {
					if err := c.Start(); err != nil {
						b.Fatal(err)
					}
				}
				for i, c := range cmds {
					if err := c.Wait(); err != nil {
						b.Fatalf("process %d: %v\n%s", i, err, outs[i])
					}
				}
				elapsed += time.Since(start)
				b.StopTimer()
				n := benchPGCounts(b, conn, prefix)
				benchPGDrop(b, conn, prefix)
				if n != [3]int{benchRevisions / 10, benchRevisions, benchRevisions} {
					b.Fatalf("%d processes wrote %v rows (metas, resource_data, resource_index)", procs, n)
				}
				b.StartTimer()
			}
			rate := benchRevisions / (elapsed.Seconds() / float64(b.N))
			b.ReportMetric(rate, "revisions/s")
			if procs == 1 {
				one = rate
			}
			if one > 0 {
				b.ReportMetric(rate/one, "x_vs_1")
			}
		})
	}
}
