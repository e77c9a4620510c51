package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// Dead-letter headers, added to the original event's headers.
const (
	headerDLQReason  = "Specstar-Dlq-Reason"
	headerDLQSink    = "Specstar-Dlq-Sink"
	headerDLQSeq     = "Specstar-Dlq-Stream-Seq"
	headerDLQSubject = "Specstar-Dlq-Subject"
)

// workerConfig tunes one sink's consumer.
type workerConfig struct {
	batch         int           // messages fetched, applied, made durable and acked together
	maxAckPending int           // JetStream flow control for the durable consumer
	ackWait       time.Duration // redelivery after this long without an ack
	untilDrained  bool          // stop once everything the stream held at start is applied
	acceptGap     bool          // go on even if the stream no longer holds events this sink never saw
	parallel      int           // events of a batch applied at once
}

// worker moves events from one durable consumer into one sink.
type worker struct {
	spec *sink.Spec
	sink sink.Sink
	bus  *stream.Bus
	cfg  workerConfig
	log  *slog.Logger
	m    *metrics

	fresh bool // the durable consumer was created by this run

	errMu     sync.Mutex
	lastErrAt time.Time
	applied   int64 // events acked
	bytes     int64 // payload bytes acked
	dead      int64
}

// invalidError marks an event that can never be applied (it is
// dead-lettered, not retried).
type invalidError struct{ reason string }

func (e *invalidError) Error() string { return e.reason }

func invalid(format string, args ...any) error {
	return &invalidError{reason: fmt.Sprintf(format, args...)}
}

func isPermanent(err error) bool {
	var ie *invalidError
	return errors.As(err, &ie) || sink.IsInvalid(err)
}

// consumer creates or resumes the sink's durable pull consumer.
func (w *worker) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:       w.spec.Name,
		Description:   "SpecStar sink " + w.spec.Raw,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.ackWait,
		MaxAckPending: w.cfg.maxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if f := w.spec.Filters(w.bus.Prefix()); len(f) == 1 {
		cfg.FilterSubject = f[0]
	} else {
		cfg.FilterSubjects = f
	}
	if _, err := w.bus.Stream.Consumer(ctx, w.spec.Name); errors.Is(err, jetstream.ErrConsumerNotFound) {
		w.fresh = true // a new sink: it has seen nothing yet
	}
	c, err := w.bus.Stream.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", w.spec.Name, err)
	}
	return c, nil
}

// run consumes until ctx ends or, with untilDrained, until every event the
// stream held when run started is applied.
func (w *worker) run(ctx context.Context) error {
	cons, err := w.consumer(ctx)
	if err != nil {
		return err
	}
	if err := w.checkGap(ctx, cons); err != nil {
		return err
	}
	var target uint64
	var meter *progress.Meter
	if w.cfg.untilDrained {
		info, err := w.bus.Stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream info: %w", err)
		}
		target = info.State.LastSeq
		if ci, err := cons.Info(ctx); err == nil {
			meter = progress.NewCount("sink "+w.spec.Raw, int64(ci.NumPending)+int64(ci.NumAckPending), w.log)
			defer meter.Done()
		}
	}
	w.m.setReady(w.spec.Name, true)
	defer w.m.setReady(w.spec.Name, false)
	go w.watchConsumer(ctx, cons)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if w.cfg.untilDrained {
			done, err := w.drained(ctx, cons, target)
			if err != nil {
				return err
			}
			if done {
				return nil
			}
		}
		msgs, err := w.fetch(ctx, cons)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			w.log.Warn("fetch failed; retrying", "sink", w.spec.Name, "err", err)
			w.sleep(ctx, time.Second)
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		if _, err := w.process(ctx, msgs); err != nil {
			return err
		}
		w.bytes += batchBytes(msgs)
		if meter != nil {
			meter.Update(w.applied, w.bytes)
		}
	}
}

// checkGap refuses to go on when retention (max age or size) removed
// events from the stream before this sink applied them: the consumer would
// silently skip to what is left. It compares the stream's first sequence
// with the consumer's ack floor; for a sink filtered to some models the
// removed events may all be other models', so it is not checked there.
func (w *worker) checkGap(ctx context.Context, cons jetstream.Consumer) error {
	if len(w.spec.Models) > 0 {
		return nil
	}
	sinfo, err := w.bus.Stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	cinfo, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer info: %w", err)
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
	msg := fmt.Sprintf("sink %s has applied the stream up to sequence %d, but the stream now starts at %d: events %d..%d were removed (retention) before this sink saw them",
		w.spec.Name, floor, first, floor+1, first-1)
	if w.cfg.acceptGap {
		w.log.Warn(msg + "; going on because of --accept-gap")
		return nil
	}
	return fmt.Errorf("%s. Rebuild or repair the sink from its source (for an archive: writer replay it, or replicator mirror into a fresh directory; for Postgres: writer snapshot --restart), or run with --accept-gap to go on without them", msg)
}

// sinkError is the last error of a sink, kept in the positions bucket so
// that `replicator status`, another process, can show it.
type sinkError struct {
	Op    string    `json:"op"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

func sinkErrorKey(name string) string { return "sink-error." + name }

// recordError stores the sink's last error, at most once a second.
func (w *worker) recordError(ctx context.Context, op string, err error) {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if time.Since(w.lastErrAt) < time.Second {
		return
	}
	w.lastErrAt = time.Now()
	kv, kerr := w.bus.Positions(ctx)
	if kerr != nil {
		return
	}
	b, _ := json.Marshal(sinkError{Op: op, Error: err.Error(), At: w.lastErrAt.UTC()})
	if _, perr := kv.Put(ctx, sinkErrorKey(w.spec.Name), b); perr != nil {
		w.log.Debug("could not store the sink's last error", "err", perr)
	}
}

// watchConsumer copies the consumer's figures into the metrics every few
// seconds until ctx ends.
func (w *worker) watchConsumer(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		if info, err := cons.Info(ctx); err == nil {
			w.m.pending.WithLabelValues(w.spec.Name).Set(float64(info.NumPending))
			w.m.ackPending.WithLabelValues(w.spec.Name).Set(float64(info.NumAckPending))
			w.m.ackFloor.WithLabelValues(w.spec.Name).Set(float64(info.AckFloor.Stream))
			w.m.redelivered.WithLabelValues(w.spec.Name).Set(float64(info.NumRedelivered))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fetch returns the next batch: it waits up to a second for the first
// event, then takes whatever else is already there, up to cfg.batch, so
// a trickle of events is applied at once and a backlog in full batches.
func (w *worker) fetch(ctx context.Context, cons jetstream.Consumer) ([]jetstream.Msg, error) {
	var msgs []jetstream.Msg
	first, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		return nil, err
	}
	for m := range first.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 || w.cfg.batch <= 1 {
		return msgs, nil
	}
	rest, err := cons.FetchNoWait(w.cfg.batch - len(msgs))
	if err != nil {
		return msgs, nil // the first is enough to go on with
	}
	for m := range rest.Messages() {
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// drained reports whether the consumer has acknowledged everything up to
// target: its ack floor has reached it, or (with a subject filter, whose
// floor may stop below) nothing is pending or awaiting an ack. Events
// delivered to a process that died count as awaiting an ack until
// JetStream redelivers them after AckWait.
func (w *worker) drained(ctx context.Context, cons jetstream.Consumer, target uint64) (bool, error) {
	if target == 0 {
		return true, nil
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("consumer info: %w", err)
	}
	w.m.pending.WithLabelValues(w.spec.Name).Set(float64(info.NumPending))
	return info.AckFloor.Stream >= target || (info.NumPending == 0 && info.NumAckPending == 0), nil
}

// process applies a batch, makes it durable, then acks it; it returns the
// highest stream sequence acked. Events of a batch are applied by up to
// cfg.parallel goroutines, one resource's events in stream order (the
// sinks lock per resource, and concurrent fsyncs share the file system's
// journal commits).
func (w *worker) process(ctx context.Context, msgs []jetstream.Msg) (uint64, error) {
	start := time.Now()
	type result struct {
		kind, outcome string
		err           error
	}
	results := make([]result, len(msgs))
	// Events of one resource keep their stream order (a purge must not
	// overtake the meta it deletes); different resources go in parallel.
	var groups [][]int
	byKey := map[string]int{}
	for i, msg := range msgs {
		h := msg.Headers()
		key := h.Get(events.HeaderModel) + "\x00" + h.Get(events.HeaderResourceID) + "\x00" + h.Get(events.HeaderFileID)
		if h.Get(events.HeaderResourceID) == "" && h.Get(events.HeaderFileID) == "" {
			key = fmt.Sprintf("\x01%d", i) // nothing to order it by
		}
		g, ok := byKey[key]
		if !ok {
			g = len(groups)
			byKey[key] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	sem := make(chan struct{}, max(w.cfg.parallel, 1))
	var wg sync.WaitGroup
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, i := range g {
				r := &results[i]
				r.kind, r.outcome, r.err = w.applyWithRetry(ctx, msgs[i])
			}
		}()
	}
	wg.Wait()
	var last uint64
	for i, msg := range msgs {
		r := results[i]
		if r.err != nil {
			if !isPermanent(r.err) {
				return last, r.err // only ctx ends a transient retry loop
			}
			if err := w.deadLetter(ctx, msg, r.err); err != nil {
				return last, err
			}
			r.outcome = "dead_letter"
		}
		w.m.applied.WithLabelValues(w.spec.Name, r.kind, r.outcome).Inc()
	}
	if err := w.retry(ctx, "flush", func() error { return w.sink.Flush(ctx) }); err != nil {
		return last, err
	}
	for i, msg := range msgs {
		var err error
		if i == len(msgs)-1 {
			// Wait for the server to confirm the last ack of the batch, so
			// a clean stop never leaves acked-but-unconfirmed work behind.
			err = msg.DoubleAck(ctx)
		} else {
			err = msg.Ack()
		}
		if err != nil {
			// The write is durable and idempotent: a lost ack only means a
			// redelivery that changes nothing.
			w.log.Warn("ack failed", "sink", w.spec.Name, "err", err)
		}
		if md, err := msg.Metadata(); err == nil {
			last = max(last, md.Sequence.Stream)
		}
		w.applied++
	}
	w.m.lastSeq.WithLabelValues(w.spec.Name).Set(float64(last))
	w.m.batch.WithLabelValues(w.spec.Name).Observe(time.Since(start).Seconds())
	return last, nil
}

func (w *worker) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// retry runs op until it succeeds, fails permanently, or ctx ends,
// backing off exponentially (capped at 30 s) between transient failures.
func (w *worker) retry(ctx context.Context, what string, op func() error) error {
	eb := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(0), backoff.WithMaxInterval(30*time.Second))
	return backoff.RetryNotify(func() error {
		err := op()
		if err != nil && isPermanent(err) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(eb, ctx), func(err error, d time.Duration) {
		w.m.retries.WithLabelValues(w.spec.Name).Inc()
		w.log.Warn("sink error; retrying", "sink", w.spec.Name, "op", what, "in", d.String(), "err", err)
		w.recordError(ctx, what, err)
	})
}

func (w *worker) applyWithRetry(ctx context.Context, msg jetstream.Msg) (kind, outcome string, err error) {
	kind = msg.Headers().Get(events.HeaderKind)
	err = w.retry(ctx, "apply "+kind, func() error {
		var aerr error
		outcome, aerr = w.apply(ctx, msg)
		return aerr
	})
	return kind, outcome, err
}

// apply decodes one event and hands it to the sink.
func (w *worker) apply(ctx context.Context, msg jetstream.Msg) (string, error) {
	h := msg.Headers()
	model := h.Get(events.HeaderModel)
	payload := msg.Data()
	tag, err := events.PeekTag(events.Msgpack, payload)
	if err != nil {
		return "", invalid("undecodable record: %v", err)
	}
	var out sink.Outcome
	switch tag {
	case events.TagMeta:
		rec, err := events.DecodeRecord(events.Msgpack, payload)
		if err != nil {
			return "", invalid("MetaRecord: %v", err)
		}
		meta, err := rec.(*events.MetaRecord).Meta()
		if err != nil {
			return "", invalid("MetaRecord data is not a valid ResourceMeta: %v", err)
		}
		out, err = w.sink.ApplyMeta(ctx, model, meta)
		if err != nil {
			return "", err
		}
	case events.TagRevision:
		rec, err := events.DecodeRecord(events.Msgpack, payload)
		if err != nil {
			return "", invalid("RevisionRecord: %v", err)
		}
		res, err := rec.(*events.RevisionRecord).Resource()
		if err != nil {
			return "", invalid("RevisionRecord data is not a valid RawResource: %v", err)
		}
		if out, err = w.sink.ApplyRevision(ctx, model, res); err != nil {
			return "", err
		}
	case events.TagBlob:
		rec, err := events.DecodeRecord(events.Msgpack, payload)
		if err != nil {
			return "", invalid("BlobRecord: %v", err)
		}
		b := rec.(*events.BlobRecord)
		if out, err = w.sink.ApplyBlob(ctx, b.FileID, b.Size, b.ContentType, bytes.NewReader(b.BlobData)); err != nil {
			return "", err
		}
	case events.TagBlobRef:
		ref, err := events.DecodeBlobRef(payload)
		if err != nil {
			return "", invalid("BlobRefRecord: %v", err)
		}
		r, err := w.bus.OpenBlob(ctx, ref.Bucket, ref.FileID)
		if (errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)) && !w.bus.IsMirror() {
			// The publisher puts the object before the event, so it was
			// removed since: waiting will not bring it back. (In a mirror
			// region the object store's mirror may simply lag the event
			// stream's: there it is retried.)
			return "", invalid("blob %s is not in object store %s", ref.FileID, ref.Bucket)
		}
		if err != nil {
			return "", err // transient
		}
		out, err = w.sink.ApplyBlob(ctx, ref.FileID, ref.Size, ref.ContentType, r)
		r.Close()
		if err != nil {
			return "", err
		}
	case events.TagPurge:
		pr, err := events.DecodePurge(payload)
		if err != nil {
			return "", invalid("PurgeRecord: %v", err)
		}
		if out, err = w.sink.ApplyPurge(ctx, model, pr.ResourceID, pr.PurgedTime); err != nil {
			return "", err
		}
	default:
		return "ignored", nil // a tag this sink has nothing to store for
	}
	return out.String(), nil
}

// deadLetter moves an event the sink can never apply to the dead-letter
// stream, with the reason, and counts it.
func (w *worker) deadLetter(ctx context.Context, msg jetstream.Msg, cause error) error {
	dl := nats.NewMsg(w.bus.DLQSubject(w.spec.Name))
	for k, vs := range msg.Headers() {
		for _, v := range vs {
			dl.Header.Add(k, v)
		}
	}
	seq := uint64(0)
	if md, err := msg.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	dl.Header.Set(headerDLQReason, cause.Error())
	dl.Header.Set(headerDLQSink, w.spec.Name)
	dl.Header.Set(headerDLQSeq, strconv.FormatUint(seq, 10))
	dl.Header.Set(headerDLQSubject, msg.Subject())
	// Re-dead-lettering after a crash stores it once.
	dl.Header.Set(events.HeaderMsgID, fmt.Sprintf("dlq-%s-%d", w.spec.Name, seq))
	dl.Data = msg.Data()
	err := w.retry(ctx, "dead-letter", func() error {
		_, err := w.bus.JS.PublishMsg(ctx, dl)
		return err
	})
	if err != nil {
		return err
	}
	w.dead++
	w.m.deadLetters.WithLabelValues(w.spec.Name).Inc()
	w.recordError(ctx, "dead-letter", cause)
	w.log.Error("event dead-lettered", "sink", w.spec.Name, "stream_seq", seq, "subject", msg.Subject(), "reason", cause.Error())
	return nil
}

func batchBytes(msgs []jetstream.Msg) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(len(m.Data()))
	}
	return n
}
