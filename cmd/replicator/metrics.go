package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/specstar/replicator/internal/httpops"
	"github.com/specstar/replicator/replicate"
)

// serveMetrics creates the engine's metrics on a registry of their own,
// with the Go runtime's, the process's, specstar_nats_connected and
// specstar_build_info, and exposes them on addr as
// /metrics, with /healthz and /readyz (every sink's consumer is running
// and connected() is true: the stream's connection is up), until ctx
// ends. An empty addr serves nothing.
func serveMetrics(ctx context.Context, addr string, connected func() bool, log *slog.Logger) (*replicate.Metrics, error) {
	reg := prometheus.NewRegistry()
	m, err := replicate.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("register Go metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("register process metrics: %w", err)
	}
	if err := httpops.Register(reg, connected); err != nil {
		return nil, err
	}
	if err := httpops.Serve(ctx, addr, reg, func() bool { return m.Ready() && connected() }, log); err != nil {
		return nil, err // the caller names --listen
	}
	return m, nil
}
