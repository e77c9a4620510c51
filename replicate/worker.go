package replicate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// Config tunes a sink's consumer. Zero values are passed on as they are
// (JetStream's own default for MaxAckPending and AckWait, one event at a
// time for Batch and Parallel); DefaultConfig gives the command's defaults.
type Config struct {
	Batch int // events fetched, applied, made durable and acked together
	// MaxBatch is how far a batch grows while a backlog waits: each full
	// batch fetched with more events pending doubles the next one, up to
	// MaxBatch events (and MaxAckPending) and MaxBatchBytes of payload, so
	// that a sink whose cost is per batch (a transaction, a COPY) catches
	// up in few of them; a batch that empties the backlog brings it back to
	// Batch. 0 or less than Batch: batches stay at Batch.
	MaxBatch int
	// MaxBatchBytes bounds a grown batch's payload bytes (estimated from
	// the previous batch's mean event size); 0: no bound but MaxBatch.
	MaxBatchBytes int64
	MaxAckPending int           // unacknowledged events JetStream lets the sink hold
	AckWait       time.Duration // redeliver an event not acked within this time
	Parallel      int           // events of a batch applied at once
	UntilDrained  bool          // return once everything the stream held at start is applied
	AcceptGap     bool          // go on even if the stream no longer holds events the sink never saw
	// MirrorWait bounds how long UntilDrained on a mirror stream waits for
	// the mirror to catch up with its origin before it drains what it
	// holds (saying so).
	MirrorWait time.Duration
}

// DefaultConfig is the tuning `replicator run` uses unless told otherwise.
func DefaultConfig() Config {
	return Config{Batch: 256, MaxBatch: 4096, MaxBatchBytes: 32 << 20, MaxAckPending: 12288, AckWait: time.Minute, Parallel: 16, MirrorWait: time.Minute}
}

// Options say which sink a Worker feeds and how.
type Options struct {
	Config
	Name    string       // the durable consumer's name: stable for the same destination, so a restart resumes
	Display string       // how people see the sink (its redacted URL), in messages and logs
	Models  []string     // only these models' events (nil: every event)
	Logger  *slog.Logger // nil: discard
	Metrics *Metrics     // nil: series of its own, registered nowhere
}

// Stats count what a Worker did.
type Stats struct {
	Applied      int64 // events acked (dead letters included)
	DeadLettered int64 // events moved to the dead-letter stream
	Bytes        int64 // payload bytes acked
}

// Worker moves events from one durable consumer into one sink.
type Worker struct {
	bus  *stream.Bus
	snk  sink.Sink
	opts Options
	log  *slog.Logger
	m    *Metrics

	fresh bool // the durable consumer was created by this run

	// overlap: the sink's Flush may run beside its Apply calls
	// (sink.Overlapper), so while a backlog waits one batch is made
	// durable while the next is applied. flushing is that batch, touched
	// only by Run's goroutine.
	overlap  bool
	flushing *flushJob

	errMu     sync.Mutex
	lastErrAt time.Time

	applied, bytes, dead atomic.Int64

	// drainTo, set by Pipe, delivers the sequence UntilDrained drains to
	// once the source is all published; until then Run applies what
	// arrives.
	drainTo chan uint64

	// stopAt, set by Restore, is the last stream sequence a point-in-time
	// restore applies: events after it are fetched but never applied, and
	// Run returns once everything up to it is. passed says an event after
	// it was fetched, so every event up to it has been delivered.
	stopAt uint64
	passed atomic.Bool
	// asOf, set by Restore with Force into a sink that was not empty,
	// notes the newest meta applied to each resource.
	asOf *asOfTracker
}

// NewWorker prepares a worker that feeds snk from bus; Run starts it. The
// caller keeps ownership of bus and snk.
func NewWorker(bus *stream.Bus, snk sink.Sink, opts Options) (*Worker, error) {
	if bus == nil || snk == nil {
		return nil, fmt.Errorf("sink %s: a worker needs a stream and a sink", opts.Display)
	}
	if opts.Name == "" {
		return nil, fmt.Errorf("sink %s: a worker needs a consumer name", opts.Display)
	}
	if opts.Display == "" {
		opts.Display = opts.Name
	}
	w := &Worker{bus: bus, snk: snk, opts: opts, log: opts.Logger, m: opts.Metrics}
	if o, ok := snk.(sink.Overlapper); ok {
		w.overlap = o.OverlapsFlush()
	}
	if w.log == nil {
		w.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if w.m == nil {
		w.m, _ = NewMetrics(nil) // registers nothing, so it cannot fail
	}
	return w, nil
}

// Name is the worker's durable consumer name.
func (w *Worker) Name() string { return w.opts.Name }

// Stats returns what the worker has done so far; safe while it runs.
func (w *Worker) Stats() Stats {
	return Stats{Applied: w.applied.Load(), DeadLettered: w.dead.Load(), Bytes: w.bytes.Load()}
}

// RunAll runs every worker at once, each on its own durable consumer, so a
// slow or failing sink never holds back another. It returns when all have
// returned (until drained, or ctx ended), with each worker's error at its
// index (nil for a worker that ended cleanly).
func RunAll(ctx context.Context, workers ...*Worker) []error {
	var wg sync.WaitGroup
	errs := make([]error, len(workers))
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.Run(ctx)
			if errs[i] != nil && !errors.Is(errs[i], context.Canceled) {
				w.log.Error("sink stopped", "sink", w.opts.Name, "err", errs[i])
			}
		}()
	}
	wg.Wait()
	return errs
}

// filters are the consumer's subject filters.
func (w *Worker) filters() []string {
	prefix := w.bus.Prefix()
	if len(w.opts.Models) == 0 {
		return []string{prefix + ".>"}
	}
	out := make([]string, 0, len(w.opts.Models))
	for _, m := range w.opts.Models {
		out = append(out, prefix+"."+events.SubjectToken(m)+".>")
	}
	return out
}

// consumer creates or resumes the sink's durable pull consumer.
func (w *Worker) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable: w.opts.Name,
		// No URL here, not even redacted: the description is stored on the
		// server and shown to anyone who can read the stream.
		Description:   "SpecStar sink consumer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.opts.AckWait,
		MaxAckPending: w.opts.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if w.stopAt > 0 {
		// A restore's consumer is its own, deleted when it ends; one left
		// by a killed restore is removed by the server once idle.
		cfg.Description = "SpecStar point-in-time restore"
		cfg.InactiveThreshold = restoreInactive
	}
	if f := w.filters(); len(f) == 1 {
		cfg.FilterSubject = f[0]
	} else {
		cfg.FilterSubjects = f
	}
	_, err := stream.Call(ctx, w.bus, "consumer "+w.opts.Name+" info", func(ctx context.Context) (jetstream.Consumer, error) {
		return w.bus.Stream.Consumer(ctx, w.opts.Name)
	})
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		w.fresh = true // a new sink: it has seen nothing yet
	case err != nil:
		return nil, fmt.Errorf("consumer %s: %w", w.opts.Name, err)
	}
	c, err := stream.Call(ctx, w.bus, "consumer "+w.opts.Name+" create or update", func(ctx context.Context) (jetstream.Consumer, error) {
		return w.bus.Stream.CreateOrUpdateConsumer(ctx, cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", w.opts.Name, err)
	}
	return c, nil
}

// Run consumes until ctx ends or, with UntilDrained, until every event the
// stream held when Run started is applied (then it returns nil).
func (w *Worker) Run(ctx context.Context) (runErr error) {
	w.m.initSink(w.opts.Name)
	cons, err := w.consumer(ctx)
	if err != nil {
		return err
	}
	if w.stopAt == 0 { // a restore checked what retention removed itself
		if m, ok := w.snk.(Marker); ok {
			if cons, err = w.checkMark(ctx, m, cons); err != nil {
				return err
			}
		}
		if err := w.checkGap(ctx, cons); err != nil {
			return err
		}
	}
	var target uint64
	var meter *progress.Meter
	known := w.drainTo == nil // the drain target is known
	if w.opts.UntilDrained && known {
		if target = w.stopAt; target == 0 {
			if target, err = w.drainTarget(ctx); err != nil {
				return err
			}
		}
		if ci, err := w.consumerInfo(ctx, cons); err == nil {
			total := int64(ci.NumPending) + int64(ci.NumAckPending)
			if w.stopAt > 0 {
				total = min(total, int64(w.stopAt))
			}
			meter = progress.NewCount("sink "+w.opts.Display, total, w.log)
			defer func() { meter.Stop(runErr) }()
		}
	}
	w.m.setReady(w.opts.Name, true)
	defer w.m.setReady(w.opts.Name, false)
	defer func() {
		// the batch still being made durable: acked before Run returns
		if err := w.waitFlush(); err != nil && runErr == nil {
			runErr = err
		}
	}()
	if ci, err := w.consumerInfo(ctx, cons); err == nil {
		w.log.Info("consuming", "sink", w.opts.Display, "consumer", w.opts.Name, "stream", w.bus.Config().Stream,
			"ack_floor", ci.AckFloor.Stream, "pending", ci.NumPending, "until_drained", w.opts.UntilDrained)
	}
	go w.watchConsumer(ctx, cons)
	size := w.opts.Batch
	// While a backlog waits, the next batch is fetched while this one is
	// applied (ahead), so that fetching costs no time of its own.
	type fetched struct {
		msgs []jetstream.Msg
		err  error
	}
	var ahead chan fetched
	// idleBefore: the last drain check found the consumer idle, and no
	// fetch has returned an event since (drainDone).
	var idleBefore bool
	fetchAhead := func(size int) {
		ch := make(chan fetched, 1)
		go func() {
			msgs, err := w.fetch(ctx, cons, size)
			ch <- fetched{msgs, err}
		}()
		ahead = ch
	}
	defer func() {
		if ahead != nil {
			// fetched, never applied: handed back for redelivery now
			// rather than after AckWait
			for _, m := range (<-ahead).msgs {
				_ = m.Nak()
			}
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var msgs []jetstream.Msg
		var err error
		if ahead != nil {
			f := <-ahead
			ahead, msgs, err = nil, f.msgs, f.err
		} else {
			// Nothing fetched ahead: no backlog waits, or a purge came.
			// What is being made durable is acked first, so that the
			// drain check counts it and a trickle of events is acked at
			// once.
			if err := w.waitFlush(); err != nil {
				return err
			}
			if w.passed.Load() {
				return nil // a restore: everything up to its sequence is applied
			}
			if !known {
				select {
				case target = <-w.drainTo:
					known = true
				default:
				}
			}
			if w.opts.UntilDrained && known {
				done, idle, err := w.drained(ctx, cons, target)
				if err != nil {
					return err
				}
				if drainDone(done, idle, idleBefore) {
					return nil
				}
				idleBefore = idle
			}
			msgs, err = w.fetch(ctx, cons, size)
		}
		if len(msgs) > 0 {
			idleBefore = false
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if ue := (*stream.UnavailableError)(nil); errors.As(err, &ue) {
				return err // waited the whole --unavailable-timeout
			}
			w.log.Warn("fetch failed; retrying", "sink", w.opts.Name, "err", err)
			sleep(ctx, time.Second)
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		n := batchBytes(msgs)
		size = w.nextBatch(size, msgs, n)
		// A backlog waits (the batch grew) and this batch holds no purge,
		// whose wait for earlier acks must not count events fetched ahead.
		purge := slices.ContainsFunc(msgs, isPurge)
		if size > w.opts.Batch && !purge {
			fetchAhead(size)
		}
		if w.overlap && !purge {
			if err := w.processOverlapped(ctx, msgs); err != nil {
				return err
			}
		} else {
			// A purge waits for every earlier event to be acked: the
			// batch being made durable first.
			if err := w.waitFlush(); err != nil {
				return err
			}
			if _, err := w.processInOrder(ctx, cons, msgs); err != nil {
				return err
			}
		}
		w.bytes.Add(n)
		if meter != nil {
			meter.Update(w.applied.Load(), w.bytes.Load())
		}
	}
}

// drainTarget is the stream sequence UntilDrained drains to: the stream's
// last one. On a mirror (a second region) it is the origin's last one,
// which the mirror holds once it has caught up: right after the mirror is
// created it holds nothing yet, and draining to that would end at once
// with nothing applied. So it waits, up to MirrorWait, for the mirror to
// reach the origin's last sequence. A mirror whose origin cannot be
// reached (a partition) serves what it holds, as does one still behind
// after MirrorWait, and the log says which.
func (w *Worker) drainTarget(ctx context.Context) (uint64, error) {
	last := func() (uint64, error) {
		info, err := w.streamInfo(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.LastSeq, nil
	}
	if !w.bus.IsMirror() {
		return last()
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	origin, err := w.bus.OriginLastSeq(octx)
	cancel()
	if err != nil {
		have, lerr := last()
		w.log.Warn("the mirror's origin cannot be reached: draining what the mirror holds", "sink", w.opts.Display, "err", err, "last_sequence", have)
		return have, lerr
	}
	deadline := time.Now().Add(w.opts.MirrorWait)
	var said time.Time
	for {
		have, err := last()
		if err != nil {
			return 0, err
		}
		switch {
		case have >= origin:
			return origin, nil
		case time.Now().After(deadline):
			w.log.Warn("the mirror is still catching up with its origin: draining what it holds", "sink", w.opts.Display,
				"origin_last_sequence", origin, "last_sequence", have, "waited", w.opts.MirrorWait)
			return have, nil
		case time.Since(said) > 5*time.Second:
			said = time.Now()
			w.log.Info("waiting for the mirror to catch up with its origin before draining", "sink", w.opts.Display,
				"origin_last_sequence", origin, "last_sequence", have)
		}
		if sleep(ctx, 100*time.Millisecond); ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}

// GapError is Run's refusal to go on when retention (max age or size)
// removed events from the stream before the sink applied them: the
// consumer would silently skip to what is left.
type GapError struct {
	Sink  string // the consumer's name
	Floor uint64 // the last stream sequence the sink applied
	First uint64 // the stream's first sequence now
}

func (e *GapError) summary() string {
	return fmt.Sprintf("sink %s has applied the stream up to sequence %d, but the stream now starts at %d: events %d..%d were removed (retention) before this sink saw them",
		e.Sink, e.Floor, e.First, e.Floor+1, e.First-1)
}

// Error says what was lost and how to repair the sink or go on anyway.
func (e *GapError) Error() string {
	return e.summary() + ". Rebuild or repair the sink from its source (for an archive: writer replay it, or replicator mirror into a fresh directory; for Postgres: writer snapshot --restart), or run with --accept-gap to go on without them"
}

// checkGap compares the stream's first sequence with the consumer's ack
// floor; for a sink filtered to some models the removed events may all be
// other models', so it is not checked there. Holes are reported either
// way (warnHoles).
func (w *Worker) checkGap(ctx context.Context, cons jetstream.Consumer) error {
	sinfo, err := w.streamInfo(ctx)
	if err != nil {
		return err
	}
	w.warnHoles(ctx, sinfo)
	if len(w.opts.Models) > 0 {
		return nil
	}
	cinfo, err := w.consumerInfo(ctx, cons)
	if err != nil {
		return err
	}
	// A new consumer starts with its floor just below the stream's first
	// event, but the sink has seen nothing: its floor is 0.
	first, floor := sinfo.State.FirstSeq, cinfo.AckFloor.Stream
	if w.fresh {
		floor = 0
	}
	if sinfo.State.Msgs == 0 || first <= floor+1 {
		return nil
	}
	gap := &GapError{Sink: w.opts.Name, Floor: floor, First: first}
	if w.opts.AcceptGap {
		w.log.Warn(gap.summary() + "; going on because of --accept-gap")
		return nil
	}
	return gap
}

// warnHoles says, once when the worker starts, that events were deleted
// from between the stream's first and last sequence (by hand, or a purge
// filtered to some subjects): a sink that went past them lacks what only
// they held, and no consumer position shows it. Only on limits retention,
// where nothing else deletes events; the count goes to the metrics too.
func (w *Worker) warnHoles(ctx context.Context, sinfo *jetstream.StreamInfo) {
	if sinfo.Config.Retention != jetstream.LimitsPolicy {
		return
	}
	w.m.holes.WithLabelValues(w.opts.Name).Set(float64(sinfo.State.NumDeleted))
	holes, err := StreamHoles(ctx, w.bus, sinfo)
	if err != nil || holes == nil {
		return
	}
	w.log.Warn(fmt.Sprintf("stream %s lacks %s deleted from between its first and last event: this sink lacks what only they held once it goes past them (replicator reconcile --from SOURCE repairs it)", holes.Stream, holes),
		"sink", w.opts.Display, "deleted", holes.Count)
}

// summaryEvery is how often a worker logs a summary line at INFO (what a
// service's `kubectl logs` shows of it).
const summaryEvery = time.Minute

// watchConsumer copies the consumer's figures into the metrics every few
// seconds, and logs a summary every summaryEvery, until ctx ends.
func (w *Worker) watchConsumer(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	name := w.opts.Name
	lastSummary, lastApplied := time.Now(), int64(0)
	for {
		if info, err := cons.Info(ctx); err == nil {
			if time.Since(lastSummary) >= summaryEvery {
				st := w.Stats()
				w.log.Info("sink summary", "sink", w.opts.Display, "applied", st.Applied, "applied_since_last", st.Applied-lastApplied,
					"dead_lettered", st.DeadLettered, "pending", info.NumPending, "ack_floor", info.AckFloor.Stream)
				lastSummary, lastApplied = time.Now(), st.Applied
			}
			w.m.pending.WithLabelValues(name).Set(float64(info.NumPending))
			w.m.ackPending.WithLabelValues(name).Set(float64(info.NumAckPending))
			w.m.ackFloor.WithLabelValues(name).Set(float64(info.AckFloor.Stream))
			w.m.redelivered.WithLabelValues(name).Set(float64(info.NumRedelivered))
			if lag, ok := w.lag(ctx, info); ok {
				w.m.lag.WithLabelValues(name).Set(lag.Seconds())
			}
		}
		if sinfo, err := w.bus.Stream.Info(ctx); err == nil && sinfo.Config.Retention == jetstream.LimitsPolicy {
			w.m.holes.WithLabelValues(name).Set(float64(sinfo.State.NumDeleted))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lag is the age of the oldest event the consumer of info has not had
// acked: the first of its subjects' messages after its ack floor, by the
// stream's timestamp; 0 when nothing waits. ok is false when the stream
// could not say.
func (w *Worker) lag(ctx context.Context, info *jetstream.ConsumerInfo) (lag time.Duration, ok bool) {
	if info.NumPending == 0 && info.NumAckPending == 0 {
		return 0, true
	}
	next := info.AckFloor.Stream + 1
	var oldest time.Time
	for _, f := range w.filters() {
		msg, err := w.bus.Stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(f))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			return 0, false
		}
		if oldest.IsZero() || msg.Time.Before(oldest) {
			oldest = msg.Time
		}
	}
	if oldest.IsZero() {
		return 0, true
	}
	return max(time.Since(oldest), 0), true
}

// nextBatch is the size of the batch after msgs (of n payload bytes),
// fetched asking for size.
func (w *Worker) nextBatch(size int, msgs []jetstream.Msg, n int64) int {
	var pending uint64
	if len(msgs) > 0 {
		if md, err := msgs[len(msgs)-1].Metadata(); err == nil {
			pending = md.NumPending
		}
	}
	c := w.opts.Config
	if w.overlap && c.MaxAckPending > 0 {
		// Three batches are out at once while a backlog waits: one made
		// durable, one applied, one fetched ahead; a batch JetStream
		// could not deliver whole would count as the backlog's end.
		c.MaxAckPending /= 3
	}
	return batchAfter(c, size, len(msgs), pending, n)
}

// batchAfter is the size of the next batch after one of got events (n
// payload bytes) fetched asking for size, with pending events still
// waiting: double while batches come full and events wait (a backlog),
// within MaxBatch, MaxAckPending and MaxBatchBytes (at the batch's mean
// event size); Batch otherwise.
func batchAfter(c Config, size, got int, pending uint64, n int64) int {
	limit := c.MaxBatch
	if c.MaxAckPending > 0 {
		limit = min(limit, c.MaxAckPending)
	}
	if limit <= c.Batch || got < size || pending == 0 {
		return c.Batch
	}
	next := min(2*size, limit)
	if c.MaxBatchBytes > 0 && n > 0 && got > 0 {
		next = min(next, int(min(c.MaxBatchBytes/max(n/int64(got), 1), int64(limit))))
	}
	return max(next, c.Batch)
}

// fetch returns the next batch: it waits up to a second for the first
// event, then takes whatever else is already there, up to size, so a
// trickle of events is applied at once and a backlog in full batches.
// A fetch that fails for an unavailable cluster (no consumer leader, a
// leadership change) waits for it (stream.Bus.Retry).
func (w *Worker) fetch(ctx context.Context, cons jetstream.Consumer, size int) ([]jetstream.Msg, error) {
	msgs, err := stream.Call(ctx, w.bus, "consumer "+w.opts.Name+" fetch", func(context.Context) ([]jetstream.Msg, error) {
		var msgs []jetstream.Msg
		first, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		for m := range first.Messages() {
			msgs = append(msgs, m)
		}
		if err := first.Error(); err != nil && len(msgs) == 0 && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, err
		}
		return msgs, nil
	})
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 || size <= 1 {
		return w.upToStop(msgs), nil
	}
	rest, err := cons.FetchNoWait(size - len(msgs))
	if err != nil {
		return w.upToStop(msgs), nil // the first is enough to go on with
	}
	for m := range rest.Messages() {
		msgs = append(msgs, m)
	}
	return w.upToStop(msgs), nil
}

// upToStop drops, for a restore, the events after its last sequence
// (they are left unacknowledged on a consumer deleted afterwards), and
// notes that one came.
func (w *Worker) upToStop(msgs []jetstream.Msg) []jetstream.Msg {
	if w.stopAt == 0 {
		return msgs
	}
	return slices.DeleteFunc(msgs, func(m jetstream.Msg) bool {
		if seqOf(m) > w.stopAt {
			w.passed.Store(true)
			return true
		}
		return false
	})
}

// drained reports whether the consumer has acknowledged everything up to
// target (its ack floor has reached it), and whether it is idle: nothing
// pending or awaiting an ack (with a subject filter, whose floor may stop
// below the target, the only sign of the end; see drainDone). Events
// delivered to a process that died count as awaiting an ack until
// JetStream redelivers them after AckWait.
func (w *Worker) drained(ctx context.Context, cons jetstream.Consumer, target uint64) (done, idle bool, err error) {
	if target == 0 {
		return true, true, nil
	}
	info, err := w.consumerInfo(ctx, cons)
	if err != nil {
		return false, false, err
	}
	w.m.pending.WithLabelValues(w.opts.Name).Set(float64(info.NumPending))
	return info.AckFloor.Stream >= target, info.NumPending == 0 && info.NumAckPending == 0, nil
}

// drainDone decides the end of an UntilDrained run: the ack floor reached
// the target (done), or the consumer was idle (nothing pending, nothing
// awaiting ack: a filtered consumer whose last events are other models'
// never reaches the target) at two checks with an empty fetch between
// them. One idle reading is not trusted: the pending count a consumer
// created while events arrive reports can lag the stream, and a mirror
// ended once with nothing applied on such a reading.
func drainDone(done, idle, idleBefore bool) bool { return done || idle && idleBefore }

// streamInfo reads the event stream's state, riding through an
// unavailable cluster.
func (w *Worker) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	name := w.bus.Config().Stream
	info, err := stream.Call(ctx, w.bus, "stream "+name+" info", func(ctx context.Context) (*jetstream.StreamInfo, error) {
		return w.bus.Stream.Info(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", name, err)
	}
	return info, nil
}

// consumerInfo reads the sink's consumer's state, riding through an
// unavailable cluster.
func (w *Worker) consumerInfo(ctx context.Context, cons jetstream.Consumer) (*jetstream.ConsumerInfo, error) {
	info, err := stream.Call(ctx, w.bus, "consumer "+w.opts.Name+" info", cons.Info)
	if err != nil {
		return nil, fmt.Errorf("consumer %s info: %w", w.opts.Name, err)
	}
	return info, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func batchBytes(msgs []jetstream.Msg) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(len(m.Data()))
	}
	return n
}
