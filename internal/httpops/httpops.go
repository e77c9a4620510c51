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
