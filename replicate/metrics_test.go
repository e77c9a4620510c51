package replicate_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// TestSeriesExistAtZeroWhenASinkStarts (issue 23, item 4): the dead
// letter and retry counters were absent until their first increment, so
// an alert on their rate saw nothing; a worker now exports every series
// of its sink at 0 when it starts, lag included.
func TestSeriesExistAtZeroWhenASinkStarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatalf("embedded JetStream: %v", err)
	}
	defer bus.Close()
	snk, err := sink.Open(ctx, "disk:"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	reg := prometheus.NewRegistry()
	m, err := replicate.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	w, err := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: "zero", Logger: log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "sink" && l.GetValue() == "zero" {
					seen[mf.GetName()]++
				}
			}
		}
	}
	for name, want := range map[string]int{
		"specstar_sink_dead_letters_total":         1,
		"specstar_sink_retries_total":              1,
		"specstar_sink_data_hash_mismatches_total": 1,
		"specstar_sink_records_total":              30, // 5 kinds x 6 outcomes
		"specstar_sink_lag_seconds":                1,
		"specstar_sink_pending_messages":           1,
		"specstar_sink_batch_seconds":              1,
	} {
		if seen[name] != want {
			t.Errorf("%s: %d series for sink zero, want %d", name, seen[name], want)
		}
	}
	if got := counterValue(t, reg, "specstar_sink_dead_letters_total"); got != 0 {
		t.Errorf("specstar_sink_dead_letters_total = %v, want 0", got)
	}
}
