package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultUnavailableTimeout is how long a call to the JetStream API waits
// for an unavailable cluster (leader elections, a lost quorum, every
// server down) before it fails, unless Config.UnavailableTimeout says
// otherwise.
const DefaultUnavailableTimeout = 2 * time.Minute

// JetStream API error codes that a cluster answers while it elects
// leaders, lacks a quorum or moves peers (nats-server's errors.json).
var transientCodes = map[jetstream.ErrorCode]string{
	10005: "no suitable peers for placement",
	10007: "the cluster has not yet assigned the asset to this server",
	10008: "JetStream system temporarily unavailable",
	10009: "the cluster can not handle the request (no leader)",
	10075: "peer remap",
	10118: "stream offline (no quorum)",
	10119: "consumer offline (no quorum)",
	10163: "expected last sequence per subject temporarily unavailable",
	10202: "cluster member change in progress",
}

// transientErrors are the client-side errors of an unavailable server or
// cluster: nobody answered, or the connection is being re-established.
var transientErrors = []error{
	context.DeadlineExceeded, // a request's own timeout (the caller's context is checked apart)
	nats.ErrTimeout,
	nats.ErrNoResponders,
	nats.ErrDisconnected,
	nats.ErrConnectionReconnecting,
	nats.ErrNoServers,
	nats.ErrStaleConnection,
	jetstream.ErrNoStreamResponse,
	jetstream.ErrConsumerLeadershipChanged,
	jetstream.ErrNoHeartbeat,
}

// transientText are parts of messages that mean the same, for errors
// that reach us as text only (a server's error in a publish
// acknowledgement, an object store failure wrapped without %w).
var transientText = []string{
	"no suitable peers",
	"temporarily unavailable",
	"leadership change",
	"no responders",
	"no response from stream",
	"stream is offline",
	"consumer is offline",
	"cluster can not handle request",
	"context deadline exceeded",
	"i/o timeout",
}

// Transient reports whether err is one of JetStream's passing states: an
// API timeout, no responders, a leader election, a lost quorum, a
// connection being re-established. Such a call is retried (Bus.Retry).
// Anything else (a stream that does not exist, settings that differ, a
// bad request, the caller's context ending) is not.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrConnectionClosed) {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		_, ok := transientCodes[api.ErrorCode]
		if ok && (api.ErrorCode == 10118 || api.ErrorCode == 10119) {
			// "offline: <reason>" (10194, 10195) names an asset this
			// server cannot run, which waiting does not change; the bare
			// code is an asset without a quorum.
			return true
		}
		return ok
	}
	for _, t := range transientErrors {
		if errors.Is(err, t) {
			return true
		}
	}
	msg := strings.ToLower(err.Error())
	for _, t := range transientText {
		if strings.Contains(msg, t) {
			return true
		}
	}
	return false
}

// waitingFor says in a log line what a transient error waits for.
func waitingFor(err error) string {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		if s, ok := transientCodes[api.ErrorCode]; ok {
			return s
		}
	}
	switch {
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrStaleConnection):
		return "the connection to NATS to come back"
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return "a stream or consumer leader to answer"
	case errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
		return "the consumer's new leader"
	}
	return "the JetStream cluster to answer (leader election or lost quorum)"
}

// UnavailableError is a call that gave up waiting for JetStream: the
// cluster stayed unavailable for the whole UnavailableTimeout.
type UnavailableError struct {
	What    string        // the call, e.g. "stream SPECSTAR info"
	Waited  time.Duration // how long it waited
	Attempt int           // attempts made
	Err     error         // the last transient error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s: JetStream unavailable for %s (%d attempts; raise --unavailable-timeout to wait longer): %v",
		e.What, e.Waited.Round(time.Second), e.Attempt, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Retry runs op until it succeeds, fails with an error that is not
// Transient (returned at once), ctx ends, or JetStream stayed unavailable
// for the bus's UnavailableTimeout (an *UnavailableError). Between
// attempts it backs off exponentially (up to 5 s), logs at warn what it
// waits for, and marks the bus unavailable (Available) until a call
// succeeds again. Each attempt gets a context of its own that ends after
// attemptTimeout (or with ctx), so an API request that hangs is one
// attempt, not the whole wait.
func (b *Bus) Retry(ctx context.Context, what string, op func(ctx context.Context) error) error {
	return retryPolicy{limit: b.cfg.UnavailableTimeout, log: b.log, mark: b.availability, denied: b.refused.since}.run(ctx, what, op)
}

// availability tracks whether the bus's last retried JetStream call
// succeeded, for readiness probes; the zero value is available.
func (b *Bus) availability(ok bool) {
	if ok {
		if b.unavailable.Swap(false) {
			b.log.Info("JetStream available again")
		}
		return
	}
	b.unavailable.Store(true)
}

// Available reports whether JetStream answered the last call made
// through Retry (false while calls wait for an unavailable cluster), for
// readiness probes.
func (b *Bus) Available() bool { return !b.unavailable.Load() }

// attemptTimeout bounds one attempt of a retried call: nats.go's own
// default API timeout.
const attemptTimeout = 5 * time.Second

// retryPolicy is how Retry waits: limit is Config.UnavailableTimeout (0:
// DefaultUnavailableTimeout, negative: until ctx ends); mark is told
// whether each attempt found JetStream available.
type retryPolicy struct {
	limit   time.Duration
	attempt time.Duration // one attempt's bound (0: attemptTimeout)
	log     *slog.Logger
	mark    func(available bool)
	// denied, if set, returns a permission violation the server reported
	// at or after the given time: a timed-out attempt that it explains
	// is a refusal (DeniedError), not an unavailable cluster.
	denied func(since time.Time) error
}

func (p retryPolicy) run(ctx context.Context, what string, op func(ctx context.Context) error) error {
	limit := p.limit
	if limit == 0 {
		limit = DefaultUnavailableTimeout
	}
	per := p.attempt
	if per == 0 {
		per = attemptTimeout
	}
	start := time.Now()
	eb := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second),
		backoff.WithMaxElapsedTime(0),
	)
	for attempt := 1; ; attempt++ {
		began := time.Now()
		actx, cancel := context.WithTimeout(ctx, per)
		err := op(actx)
		cancel()
		if err == nil {
			p.mark(true)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !Transient(err) {
			return err
		}
		if p.denied != nil {
			if refusal := p.denied(began); refusal != nil {
				return &DeniedError{What: what, Err: refusal}
			}
		}
		p.mark(false)
		waited := time.Since(start)
		if limit > 0 && waited >= limit {
			return &UnavailableError{What: what, Waited: waited, Attempt: attempt, Err: err}
		}
		d := eb.NextBackOff()
		if limit > 0 && waited+d > limit {
			d = limit - waited
		}
		p.log.Warn("JetStream unavailable; waiting", "call", what, "attempt", attempt, "waiting_for", waitingFor(err),
			"retry_in", d.Round(time.Millisecond).String(), "waited", waited.Round(time.Millisecond).String(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}

// Call is Retry for a call that returns a value: f's result once it
// succeeds.
func Call[T any](ctx context.Context, b *Bus, what string, f func(ctx context.Context) (T, error)) (T, error) {
	var out T
	err := b.Retry(ctx, what, func(ctx context.Context) error {
		v, err := f(ctx)
		if err == nil {
			out = v
		}
		return err
	})
	return out, err
}

// stream looks a stream up, riding through an unavailable cluster.
func (b *Bus) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	return Call(ctx, b, "stream "+name+" info", func(ctx context.Context) (jetstream.Stream, error) {
		return b.JS.Stream(ctx, name)
	})
}

// createStream creates a stream, riding through an unavailable cluster.
// An attempt that timed out may have created it: the next one then
// answers that the name is in use, which the caller handles.
func (b *Bus) createStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return Call(ctx, b, "stream "+cfg.Name+" create", func(ctx context.Context) (jetstream.Stream, error) {
		return b.JS.CreateStream(ctx, cfg)
	})
}
