package replicate

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specstar/replicator/events"
)

// Metrics are the engine's Prometheus series, labelled by sink, and the
// readiness of the workers that share them. One Metrics serves any number
// of workers.
type Metrics struct {
	applied     *prometheus.CounterVec   // sink, kind, outcome
	deadLetters *prometheus.CounterVec   // sink
	retries     *prometheus.CounterVec   // sink
	batch       *prometheus.HistogramVec // sink
	lastSeq     *prometheus.GaugeVec     // sink
	pending     *prometheus.GaugeVec     // sink
	ackPending  *prometheus.GaugeVec     // sink
	ackFloor    *prometheus.GaugeVec     // sink
	redelivered *prometheus.GaugeVec     // sink
	lag         *prometheus.GaugeVec     // sink: age of the oldest unapplied event
	// hashMismatches counts revisions whose data_hash does not match
	// their payload outside a migration.
	hashMismatches *prometheus.CounterVec // sink
	// holes counts events deleted from between the stream's first and
	// last sequence (limits retention only, where nothing else deletes).
	holes *prometheus.GaugeVec // sink

	mu    sync.Mutex
	ready map[string]bool // sink -> consuming
}

// NewMetrics creates the engine's series and registers them with reg, so
// that the caller decides where they are exposed; a nil reg keeps them
// unregistered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
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
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specstar_sink_lag_seconds", Help: "Age of the oldest event the sink has not applied (0 when it has applied everything), from the stream's message timestamps.",
		}, []string{"sink"}),
		hashMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specstar_sink_data_hash_mismatches_total", Help: "Revisions applied whose data_hash does not match their payload (migrations aside).",
		}, []string{"sink"}),
		holes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specstar_stream_deleted_events", Help: "Events deleted from between the stream's first and last sequence (limits retention): a sink that went past them lacks what only they held.",
		}, []string{"sink"}),
		ready: map[string]bool{},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.applied, m.deadLetters, m.retries, m.batch, m.lastSeq, m.pending, m.ackPending, m.ackFloor, m.redelivered, m.lag, m.hashMismatches, m.holes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register replication metrics: %w", err)
		}
	}
	return m, nil
}

// recordKinds and recordOutcomes label specstar_sink_records_total.
var (
	recordKinds    = [...]string{events.KindMeta, events.KindRevision, events.KindBlob, events.KindPurge, events.KindOther}
	recordOutcomes = [...]string{"written", "unchanged", "stale", "skipped", "ignored", "dead_letter"}
)

// initSink creates every series of sink at 0, so that a counter is
// exported (and rate() and alerts see it) before its first increment.
func (m *Metrics) initSink(sink string) {
	for _, k := range recordKinds {
		for _, o := range recordOutcomes {
			m.applied.WithLabelValues(sink, k, o)
		}
	}
	for _, v := range []*prometheus.CounterVec{m.deadLetters, m.retries, m.hashMismatches} {
		v.WithLabelValues(sink)
	}
	for _, v := range []*prometheus.GaugeVec{m.lastSeq, m.pending, m.ackPending, m.ackFloor, m.redelivered, m.lag} {
		v.WithLabelValues(sink)
	}
	m.batch.WithLabelValues(sink)
}

func (m *Metrics) setReady(sink string, ok bool) {
	m.mu.Lock()
	m.ready[sink] = ok
	m.mu.Unlock()
}

// Ready reports whether every worker using m is consuming (and at least
// one has started), for a readiness probe.
func (m *Metrics) Ready() bool {
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
