// Package httpops serves what operators and orchestrators poll on a
// long-running command: Prometheus metrics, liveness and readiness.
package httpops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Timeouts bound how long the server waits on a client: for a request's
// headers, for its whole body, and for the next request on a kept-alive
// connection. Without them, idle or slow connections are held forever and
// a client can exhaust the process's file descriptors.
type Timeouts struct {
	ReadHeader time.Duration // until a request's headers are read
	Read       time.Duration // until a whole request is read
	Write      time.Duration // until a response is written
	Idle       time.Duration // between requests on a kept-alive connection
}

// DefaultTimeouts returns Serve's: generous for a scraper, short for an idle
// connection.
func DefaultTimeouts() Timeouts {
	return Timeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: 30 * time.Second}
}

// Serve exposes /metrics (reg), /healthz (the process is up) and /readyz
// (ready() is true) on addr until ctx ends, with DefaultTimeouts. An empty
// addr serves nothing.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, ready func() bool, log *slog.Logger) error {
	return ServeWith(ctx, addr, DefaultTimeouts(), reg, ready, log)
}

// ServeWith is Serve with the given timeouts.
func ServeWith(ctx context.Context, addr string, t Timeouts, reg *prometheus.Registry, ready func() bool, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready\n", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics and health server on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}
	log.Info("serving metrics and health", "addr", ln.Addr().String())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	return nil
}

// Register adds the series every service exports besides its own to reg:
// specstar_nats_connected (1 while connected() is true, else 0) and
// specstar_build_info{version,goversion} (always 1).
func Register(reg prometheus.Registerer, connected func() bool) error {
	conn := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "specstar_nats_connected", Help: "1 while the connection to NATS (and its JetStream) is up, else 0.",
	}, func() float64 {
		if connected() {
			return 1
		}
		return 0
	})
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "specstar_build_info", Help: "Always 1; its labels name the build: the module version and the Go version.",
		ConstLabels: prometheus.Labels{"version": Version(), "goversion": runtime.Version()},
	})
	info.Set(1)
	for _, c := range []prometheus.Collector{conn, info} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register service metrics: %w", err)
		}
	}
	return nil
}

// Version is the main module's version as the build recorded it
// ("(devel)" for a build from a work tree, "unknown" without build info).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" {
		return "unknown"
	}
	return bi.Main.Version
}
