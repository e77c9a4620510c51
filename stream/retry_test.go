package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTransient: the errors a cluster answers while it elects leaders or
// lacks a quorum are retried; those that waiting does not change are not.
func TestTransient(t *testing.T) {
	api := func(code int, errCode jetstream.ErrorCode, desc string) error {
		return &jetstream.APIError{Code: code, ErrorCode: errCode, Description: desc}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"API timeout", fmt.Errorf("stream SPECSTAR: %w", context.DeadlineExceeded), true},
		{"request timeout", nats.ErrTimeout, true},
		{"no responders", fmt.Errorf("consumer x: %w", nats.ErrNoResponders), true},
		{"no stream response", jetstream.ErrNoStreamResponse, true},
		{"reconnecting", nats.ErrConnectionReconnecting, true},
		{"disconnected", nats.ErrDisconnected, true},
		{"leadership change", jetstream.ErrConsumerLeadershipChanged, true},
		{"temporarily unavailable", api(503, 10008, "JetStream system temporarily unavailable"), true},
		{"no suitable peers", api(400, 10005, "no suitable peers for placement"), true},
		{"not leader", api(500, 10009, "JetStream cluster can not handle request"), true},
		{"stream offline", api(500, 10118, "stream is offline"), true},
		{"no suitable peers as text", errors.New("nats: no suitable peers for placement"), true},
		{"canceled", fmt.Errorf("fetch: %w", context.Canceled), false},
		{"closed", nats.ErrConnectionClosed, false},
		{"stream not found", jetstream.ErrStreamNotFound, false},
		{"consumer not found", jetstream.ErrConsumerNotFound, false},
		{"name in use", jetstream.ErrStreamNameAlreadyInUse, false},
		{"max payload", nats.ErrMaxPayload, false},
		{"bad request", api(400, 10003, "bad request"), false},
		{"offline with a reason", api(500, 10194, "stream is offline: unsupported feature"), false},
		{"insufficient resources", api(503, 10023, "insufficient resources"), false},
		{"settings mismatch", errors.New("stream SPECSTAR has replicas 1, but --replicas says 3"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestRetryPolicy: transient errors are retried until success, marking
// the bus unavailable meanwhile; others return at once; a limit gives up
// with an UnavailableError naming the call.
func TestRetryPolicy(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var marks []bool
	p := retryPolicy{limit: time.Minute, log: log, mark: func(ok bool) { marks = append(marks, ok) }}
	n := 0
	err := p.run(context.Background(), "stream X info", func(context.Context) error {
		if n++; n < 3 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || n != 3 || fmt.Sprint(marks) != "[false false true]" {
		t.Errorf("transient then success: err %v after %d attempts, marks %v", err, n, marks)
	}

	n = 0
	err = p.run(context.Background(), "stream X info", func(context.Context) error { n++; return jetstream.ErrStreamNotFound })
	if !errors.Is(err, jetstream.ErrStreamNotFound) || n != 1 {
		t.Errorf("permanent: err %v after %d attempts, want stream not found after 1", err, n)
	}

	p.limit, p.attempt = 300*time.Millisecond, 100*time.Millisecond
	start := time.Now()
	err = p.run(context.Background(), "consumer c fetch", func(ctx context.Context) error {
		<-ctx.Done() // a request that hangs until its attempt's deadline
		return ctx.Err()
	})
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.What != "consumer c fetch" || time.Since(start) > 5*time.Second {
		t.Errorf("unavailable: err %v after %s, want an UnavailableError for consumer c fetch", err, time.Since(start))
	}

	ctx, cancel := context.WithCancel(context.Background())
	p.limit = -1
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	err = p.run(ctx, "ack", func(context.Context) error { return nats.ErrTimeout })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("no limit, context canceled: err %v", err)
	}
}
