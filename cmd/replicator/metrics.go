package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/specstar/replicator/internal/httpops"
)

// metrics are the replicator's Prometheus series, on a registry of its own.
type metrics struct {
	reg         *prometheus.Registry
	applied     *prometheus.CounterVec   // sink, kind, outcome
	deadLetters *prometheus.CounterVec   // sink
	retries     *prometheus.CounterVec   // sink
	batch       *prometheus.HistogramVec // sink
	lastSeq     *prometheus.GaugeVec     // sink
	pending     *prometheus.GaugeVec     // sink
	ackPending  *prometheus.GaugeVec     // sink
	ackFloor    *prometheus.GaugeVec     // sink
	redelivered *prometheus.GaugeVec     // sink

	mu    sync.Mutex
	ready map[string]bool // sink -> consuming
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specstar_sink_records_total", Help: "Records applied to a sink, by kind and outcome (written, unchanged, stale, skipped, ignored).",
		}, []string{"sink", "kind", "outcome"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specstar_sink_dead_letters_total", Help: "Events a sink rejected into the dead-letter stream.",
		}, []string{"sink"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specstar_sink_retries_total", Help: "Transient sink errors retried with backoff.",
		}, []string{"sink"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "specstar_sink_batch_seconds", Help: "Time to apply, make durable and ack one batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"sink"}),
		lastSeq: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specstar_sink_last_stream_sequence", Help: "Stream sequence of the last event a sink acked.",
		}, []string{"sink"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specstar_sink_pending_messages", Help: "Messages in the stream the sink's consumer has not yet been delivered.",
		}, []string{"sink"}),
		ackPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specstar_sink_ack_pending_messages", Help: "Events delivered to the sink's consumer and not yet acked.",
		}, []string{"sink"}),
		ackFloor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specstar_sink_ack_floor_sequence", Help: "Stream sequence below which the sink has acked everything.",
		}, []string{"sink"}),
		redelivered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specstar_sink_redelivered_messages", Help: "Events the sink's consumer has redelivered and not yet had acked.",
		}, []string{"sink"}),
		ready: map[string]bool{},
	}
	m.reg.MustRegister(m.applied, m.deadLetters, m.retries, m.batch, m.lastSeq, m.pending, m.ackPending, m.ackFloor, m.redelivered,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) setReady(sink string, ok bool) {
	m.mu.Lock()
	m.ready[sink] = ok
	m.mu.Unlock()
}

func (m *metrics) allReady() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ready) == 0 {
		return false
	}
	for _, ok := range m.ready {
		if !ok {
			return false
		}
	}
	return true
}

// serve exposes /metrics, /healthz and /readyz (every sink's consumer is
// running) until ctx ends.
func (m *metrics) serve(ctx context.Context, addr string, log *slog.Logger) error {
	return httpops.Serve(ctx, addr, m.reg, m.allReady, log)
}
