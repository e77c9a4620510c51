package replicate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/stream"
)

// Ahead bounds how far a Pipe's replay may run in front of its worker:
// events and payload bytes published and not yet applied (0: no bound).
// The bytes bound keeps a stream held in memory small whatever the size
// of the records; a record too large for one message counts nothing, as
// it travels as a small reference.
type Ahead struct {
	Events int
	Bytes  int64
}

// Pipe runs replay, which publishes a source onto w's stream through the
// Paced publisher it is given, while w applies what arrives, and returns
// once w has applied everything replay published (w runs until drained,
// its target the stream's last sequence once replay is done), or when
// either fails. Publishing and applying overlap, so the job takes as long
// as the slower of the two, not their sum, and the publisher stays
// within ahead of the sink, so the stream's backlog and the message ids
// its duplicate window remembers are bounded by ahead and that window,
// whatever the size of the source. A zero Ahead: no bound (a worker
// filtered to some models never sees the others' events, so it cannot
// pace them). replayErr is replay's (or the final flush's) error,
// runErr w's.
func Pipe(ctx context.Context, w *Worker, pub *stream.Publisher, ahead Ahead, replay func(context.Context, *Paced) error) (replayErr, runErr error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.opts.UntilDrained = true
	w.drainTo = make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runErr = w.Run(ctx)
	}()
	p := &Paced{pub: pub, w: w, ahead: ahead, done: done}
	replayErr = replay(ctx, p)
	if replayErr == nil {
		replayErr = pub.Flush(ctx)
	}
	if replayErr == nil {
		info, err := w.bus.Stream.Info(ctx)
		if err != nil {
			replayErr = fmt.Errorf("stream %s info: %w", w.bus.Config().Stream, err)
		} else {
			w.drainTo <- info.State.LastSeq
		}
	}
	if replayErr != nil {
		cancel()
	}
	<-done
	if replayErr != nil && errors.Is(runErr, context.Canceled) {
		runErr = nil // stopped because the replay failed
	}
	return replayErr, runErr
}

// Paced is the publisher Pipe gives its replay: a stream.Publisher that
// waits, before each event, while the worker is ahead behind.
type Paced struct {
	pub       *stream.Publisher
	w         *Worker
	ahead     Ahead
	done      <-chan struct{} // closed when the worker stopped
	sent      int64
	sentBytes int64 // payload bytes of the inline messages sent
}

// behind says whether the worker is as far behind as ahead allows. The
// worker counts every message's payload (a reference's too), so the
// bytes it applied never lag what was counted here for them.
func (p *Paced) behind() bool {
	return p.ahead.Events > 0 && p.sent-p.w.applied.Load() >= int64(p.ahead.Events) ||
		p.ahead.Bytes > 0 && p.sentBytes-p.w.bytes.Load() >= p.ahead.Bytes
}

// errWorkerStopped ends a paced replay whose worker has stopped.
var errWorkerStopped = errors.New("the sink's worker stopped")

// Publish publishes env once the worker is less than ahead behind.
func (p *Paced) Publish(ctx context.Context, env *events.Envelope) error {
	if p.ahead != (Ahead{}) {
		for wait := time.Millisecond; p.behind(); wait = min(2*wait, 50*time.Millisecond) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-p.done:
				return errWorkerStopped
			case <-time.After(wait):
			}
		}
	}
	p.sent++
	if p.pub.FitsInline(len(env.Payload)) {
		p.sentBytes += int64(len(env.Payload))
	}
	return p.pub.Publish(ctx, env)
}

// FitsInline reports whether a payload of n bytes travels as one message.
func (p *Paced) FitsInline(n int) bool { return p.pub.FitsInline(n) }

// PutBlob puts a blob too large for one message into the object store.
func (p *Paced) PutBlob(ctx context.Context, fileID string, data []byte) error {
	return p.pub.PutBlob(ctx, fileID, data)
}

// Stats are what the publisher sent and JetStream acknowledged.
func (p *Paced) Stats() stream.PublishStats { return p.pub.Stats }
