package replicate_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	srcarchive "github.com/specstar/replicator/source/archive"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/compare"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/postgres"
	"github.com/specstar/replicator/sink/s3"
	"github.com/specstar/replicator/stream"
)

// Every backend is a sink.Sink the engine can drive.
var (
	_ sink.Sink = (*disk.Sink)(nil)
	_ sink.Sink = (*postgres.Sink)(nil)
	_ sink.Sink = (*s3.Sink)(nil)
)

// TestWorkerDrainsIntoDisk drives the engine without the command: an
// archive replayed onto an embedded stream, one worker until drained into
// a disk sink, and the sink then holds every meta and revision of the
// archive; status and the metrics tell the same.
func TestWorkerDrainsIntoDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatalf("embedded JetStream: %v", err)
	}
	defer bus.Close()

	archive := testfixtures.Path(t, "small.acbak")
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pub := bus.NewPublisher(64)
	if _, err := srcarchive.Replay(ctx, f, acbak.Options{}, bus.Prefix(), bus.BlobBucket(), pub, nil); err != nil {
		t.Fatalf("replay %s: %v", archive, err)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	d, err := sink.Open(ctx, "disk:"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reg := prometheus.NewRegistry()
	m, err := replicate.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	w, err := replicate.NewWorker(bus, d, replicate.Options{Config: cfg, Name: "enginetest", Display: dir, Logger: log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if errs := replicate.RunAll(ctx, w); errs[0] != nil {
		t.Fatalf("run: %v", errs[0])
	}
	if st := w.Stats(); st.Applied == 0 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v, want events applied and none dead-lettered", st)
	}

	res, err := compare.Verify(ctx, &srcarchive.Source{Path: archive}, d.(sink.Reader), compare.VerifyOptions{Out: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if *res != (compare.VerifyResult{Metas: 6, Revisions: 10}) {
		t.Fatalf("verify: %+v, want 6 metas and 10 revisions, no blobs, no differences", *res)
	}

	sts, err := replicate.Status(ctx, bus)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 1 || sts[0].Name != "enginetest" || sts[0].Pending != 0 || sts[0].AckPending != 0 || sts[0].AckFloor != sts[0].StreamLast {
		t.Fatalf("status after the drain: %+v", sts)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range families {
		found = found || (mf.GetName() == "specstar_sink_records_total" && len(mf.GetMetric()) > 0)
	}
	if !found {
		t.Fatal("no specstar_sink_records_total series on the given registry")
	}
	for dl, err := range replicate.DeadLetters(ctx, bus, "") {
		t.Fatalf("dead letter %+v, %v; want none", dl, err)
	}
}

// testWriter sends verify's difference lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
