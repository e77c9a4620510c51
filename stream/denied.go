package stream

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// DeniedError is a call the NATS server refused for the user's
// permissions: the server answers such a request with an asynchronous
// error and no reply, so without it the call would look like an
// unavailable cluster and be retried for minutes.
type DeniedError struct {
	What string // the call, e.g. "stream SPECSTAR info"
	Err  error  // the server's refusal (errors.Is nats.ErrPermissionViolation)
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s: the NATS server refused it: %v (the NATS user this process logs in as may not do this: see its permissions in the server's authorization block)", e.What, e.Err)
}

func (e *DeniedError) Unwrap() error { return e.Err }

// refusals remembers the connection's last permission violation, so that
// a retried call that timed out can tell a refusal from a slow cluster.
type refusals struct {
	mu   sync.Mutex
	at   time.Time
	last error
}

// since returns the last refusal if it came at or after t.
func (r *refusals) since(t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil || r.at.Before(t) {
		return nil
	}
	return r.last
}

// handler is the connection's asynchronous error handler: refusals are
// remembered and logged, other errors (a slow consumer, say) logged.
func (r *refusals) handler(log *slog.Logger) nats.ErrHandler {
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			r.mu.Lock()
			r.at, r.last = time.Now(), err
			r.mu.Unlock()
			log.Warn("NATS refused a request for the user's permissions", "err", err)
			return
		}
		if sub != nil {
			log.Warn("NATS error", "subject", sub.Subject, "err", err)
			return
		}
		log.Warn("NATS error", "err", err)
	}
}
