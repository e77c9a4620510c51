package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
)

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

// process applies a batch, makes it durable, then acks it; it returns the
// highest stream sequence acked. Events of a batch are applied by up to
// Parallel goroutines, one resource's events, and revisions sharing a
// uid, in stream order (sink.Lanes; the sinks lock per resource, and
// concurrent fsyncs share the file system's journal commits).
func (w *Worker) process(ctx context.Context, msgs []jetstream.Msg) (uint64, error) {
	start := time.Now()
	if err := w.applyBatch(ctx, msgs); err != nil {
		return 0, err
	}
	return w.commit(ctx, msgs, start, w.snk.Flush, true)
}

// flushJob is a batch being made durable and acked in the background
// while the next one is applied: durable is closed once its flush
// returned (err is then set if it failed), done once it is acked too (or
// its flush failed).
type flushJob struct {
	durable chan struct{}
	done    chan struct{}
	err     error // written before durable is closed, never after
}

// processOverlapped is process for a sink that can write one batch while
// the next is applied (sink.Overlapper): it applies the batch while the
// previous one is made durable, waits for that one's flush to return,
// seals this one and, in the background, makes it durable (FlushSealed)
// and acks it once the previous batch is acked, to be waited for by the
// next batch or by waitFlush. So the sink writes the next batch while the
// previous one's acks are sent and confirmed (for Postgres, a COPY is not
// held up by a round trip to NATS), every event is still acked only after
// a flush of a batch holding it has returned, flushes run one at a time
// and in stream order, and so do the acks.
func (w *Worker) processOverlapped(ctx context.Context, msgs []jetstream.Msg) error {
	start := time.Now()
	err := w.applyBatch(ctx, msgs)
	prev := w.flushing
	if prev != nil {
		<-prev.durable
		if prev.err != nil {
			return w.waitFlush()
		}
	}
	if err != nil {
		return err
	}
	o := w.snk.(sink.Overlapper)
	o.Seal()
	f := &flushJob{durable: make(chan struct{}), done: make(chan struct{})}
	w.flushing = f
	go func() {
		defer close(f.done)
		if err := w.makeDurable(ctx, msgs, o.FlushSealed, false); err != nil {
			f.err = err
			close(f.durable)
			return
		}
		close(f.durable)
		if prev != nil {
			<-prev.done // durable without error (checked above): acks in stream order
		}
		w.acked(ctx, msgs, start)
	}()
	return nil
}

// waitFlush waits until the batch made durable in the background, if
// any, is acked (and so every batch before it), and returns its error.
func (w *Worker) waitFlush() error {
	f := w.flushing
	if f == nil {
		return nil
	}
	<-f.done
	w.flushing = nil
	return f.err
}

// applyBatch applies a batch's events to the sink, dead-lettering those
// it refuses for good; it fails only when ctx ends or a dead letter
// cannot be stored.
func (w *Worker) applyBatch(ctx context.Context, msgs []jetstream.Msg) error {
	type result struct {
		kind, outcome string
		err           error
	}
	results := make([]result, len(msgs))
	// Events of one resource keep their stream order (a purge must not
	// overtake the meta it deletes), and so do revisions sharing a uid
	// (the first in stream order keeps it in every sink); the other
	// lanes go in parallel.
	keys := make([]sink.LaneKey, len(msgs))
	payloads := make([][]byte, len(msgs)) // records fetched by reference
	fetchErrs := make([]error, len(msgs))
	sem := make(chan struct{}, max(w.opts.Parallel, 1))
	var wg sync.WaitGroup
	for i, msg := range msgs {
		h := msg.Headers()
		// The subject without its kind names the model, escaped: a
		// resource's metas, revisions and purges share the key.
		subj := msg.Subject()
		if i := strings.LastIndexByte(subj, '.'); i >= 0 {
			subj = subj[:i]
		}
		if h.Get(events.HeaderResourceID) != "" || h.Get(events.HeaderFileID) != "" {
			keys[i].Resource = subj + "\x00" + h.Get(events.HeaderResourceID) + "\x00" + h.Get(events.HeaderFileID)
		}
		if tag, _ := events.PeekTag(events.Msgpack, msg.Data()); tag == events.TagRecordRef {
			// fetched from the object store: in parallel
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				keys[i].UID, payloads[i], fetchErrs[i] = w.revisionUID(ctx, msg)
			}()
			continue
		}
		keys[i].UID, _, _ = w.revisionUID(ctx, msg) // fails only fetching
	}
	wg.Wait()
	for _, err := range fetchErrs {
		if err != nil {
			return err // only ctx ends a transient retry loop
		}
	}
	for _, lane := range sink.Lanes(keys) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, i := range lane {
				r := &results[i]
				r.kind, r.outcome, r.err = w.applyWithRetry(ctx, msgs[i], payloads[i])
			}
		}()
	}
	wg.Wait()
	name := w.opts.Name
	for i, msg := range msgs {
		r := results[i]
		if r.err != nil {
			if !isPermanent(r.err) {
				return r.err // only ctx ends a transient retry loop
			}
			if err := w.deadLetter(ctx, msg, r.err); err != nil {
				return err
			}
			r.outcome = "dead_letter"
		}
		w.m.applied.WithLabelValues(name, r.kind, r.outcome).Inc()
	}
	return nil
}

// commit makes what was applied durable (flush: the sink's Flush or
// FlushSealed), then acks msgs, a batch applied since start; it returns
// the highest stream sequence acked. When the flush refuses a record and
// drops the batch (sink.DroppedError) and isolate is set (nothing else
// was applied since), the batch is written again one event at a time and
// the refused events dead-lettered (see isolate).
func (w *Worker) commit(ctx context.Context, msgs []jetstream.Msg, start time.Time, flush func(context.Context) error, isolate bool) (uint64, error) {
	if err := w.makeDurable(ctx, msgs, flush, isolate); err != nil {
		return 0, err
	}
	return w.acked(ctx, msgs, start), nil
}

// makeDurable is commit's first half: the flush (retried, and isolated as
// commit says) and the dead letters of what the flush refused.
func (w *Worker) makeDurable(ctx context.Context, msgs []jetstream.Msg, flush func(context.Context) error, isolate bool) error {
	if err := w.retry(ctx, "flush", func() error { return flush(ctx) }); err != nil {
		if !isolate || !sink.IsDropped(err) {
			return err
		}
		if err := w.isolate(ctx, msgs, err); err != nil {
			return err
		}
	}
	return w.deadLetterRefused(ctx, msgs)
}

// acked is commit's second half, for a batch made durable: it acks msgs
// and returns the highest stream sequence acked.
func (w *Worker) acked(ctx context.Context, msgs []jetstream.Msg, start time.Time) uint64 {
	name := w.opts.Name
	var last uint64
	w.ack(ctx, msgs)
	for _, msg := range msgs {
		if md, err := msg.Metadata(); err == nil {
			last = max(last, md.Sequence.Stream)
		}
		w.applied.Add(1)
	}
	w.m.lastSeq.WithLabelValues(name).Set(float64(last))
	w.m.batch.WithLabelValues(name).Observe(time.Since(start).Seconds())
	return last
}

// ackConfirmWait bounds how long a batch's acks are sent again while the
// server does not confirm them (a consumer leader lost with them).
const ackConfirmWait = 30 * time.Second

// ack acknowledges a batch and waits for the server to confirm the last
// ack, so a clean stop never leaves acked-but-unconfirmed work behind.
// While the confirmation fails for an unavailable cluster (the consumer's
// leader died and took the earlier acks with it), it sends every ack of
// the batch again, for up to ackConfirmWait; acks are idempotent. After
// that the writes, durable and idempotent, are simply redelivered after
// AckWait and change nothing.
func (w *Worker) ack(ctx context.Context, msgs []jetstream.Msg) {
	for _, msg := range msgs[:len(msgs)-1] {
		if err := msg.Ack(); err != nil {
			w.log.Warn("ack failed", "sink", w.opts.Name, "err", err)
		}
	}
	last := msgs[len(msgs)-1]
	cctx, cancel := context.WithTimeout(ctx, ackConfirmWait)
	defer cancel()
	again := false
	err := w.bus.Retry(cctx, "consumer "+w.opts.Name+" ack", func(actx context.Context) error {
		if again {
			for _, msg := range msgs[:len(msgs)-1] {
				_ = w.bus.NC.Publish(msg.Reply(), []byte("+ACK")) // nats.go acks a message once only
			}
		}
		again = true
		err := last.DoubleAck(actx)
		if errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		w.log.Warn("ack not confirmed; the batch will be redelivered after --ack-wait and change nothing", "sink", w.opts.Name, "err", err)
	}
}

// retry runs op until it succeeds, fails permanently, or ctx ends,
// backing off exponentially (capped at 30 s) between transient failures.
func (w *Worker) retry(ctx context.Context, what string, op func() error) error {
	eb := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(0), backoff.WithMaxInterval(30*time.Second))
	return backoff.RetryNotify(func() error {
		err := op()
		if err != nil && (isPermanent(err) || sink.IsHeld(err)) {
			return backoff.Permanent(err) // held: the caller stops, as on an error of ctx
		}
		return err
	}, backoff.WithContext(eb, ctx), func(err error, d time.Duration) {
		w.m.retries.WithLabelValues(w.opts.Name).Inc()
		w.log.Warn("sink error; retrying", "sink", w.opts.Name, "op", what, "in", d.String(), "err", err)
		w.recordError(ctx, what, err)
	})
}

// applyWithRetry applies msg, retrying transient errors; fetched, if not
// nil, is the record msg refers to, already fetched from the object store.
func (w *Worker) applyWithRetry(ctx context.Context, msg jetstream.Msg, fetched []byte) (kind, outcome string, err error) {
	kind = msg.Headers().Get(events.HeaderKind)
	err = w.retry(ctx, "apply "+kind, func() error {
		var aerr error
		outcome, aerr = w.apply(ctx, msg, fetched)
		return aerr
	})
	return kind, outcome, err
}

// apply decodes one event and hands it to the sink; fetched, if not nil,
// is the record msg refers to.
func (w *Worker) apply(ctx context.Context, msg jetstream.Msg, fetched []byte) (string, error) {
	// The model comes from the subject, where it is escaped: the header's
	// copy is trimmed and rewritten by the NATS client, so "issue " or
	// "iss\nue" would land in another model's resources.
	model, _, err := events.ParseSubject(w.bus.Prefix(), msg.Subject())
	if err != nil {
		return "", invalid("%v", err)
	}
	// Names SpecStar could not have written (not UTF-8) are refused here,
	// for every sink: their JSON files and rows could not be read back.
	if err := events.CheckModelName(model); err != nil {
		return "", invalid("%v", err)
	}
	if fetched != nil {
		return w.applyPayload(ctx, model, fetched, false)
	}
	return w.applyPayload(ctx, model, msg.Data(), true)
}

// revisionOf is the RevisionInfo of the revision msg carries, nil for any
// other event or one that does not decode (its apply dead-letters it). A record
// sent by reference is fetched to read it (with retries, as its apply
// would) and returned, for the apply to use; a reference that cannot be
// fetched for good gives nil and nil, and its apply dead-letters it. It
// fails only when ctx ends.
func (w *Worker) revisionOf(ctx context.Context, msg jetstream.Msg) (*events.RevisionInfo, []byte, error) {
	payload := msg.Data()
	tag, err := events.PeekTag(events.Msgpack, payload)
	if err != nil {
		return nil, nil, nil
	}
	var fetched []byte
	if tag == events.TagRecordRef {
		ref, err := events.DecodeRecordRef(payload)
		if err != nil || ref.RecordTag != events.TagRevision {
			return nil, nil, nil
		}
		err = w.retry(ctx, "fetch record", func() error {
			var ferr error
			fetched, ferr = w.fetchRecord(ctx, payload)
			return ferr
		})
		switch {
		case isPermanent(err):
			return nil, nil, nil
		case err != nil:
			return nil, nil, err
		}
		payload = fetched
	}
	if tag, err := events.PeekTag(events.Msgpack, payload); err != nil || tag != events.TagRevision {
		return nil, fetched, nil
	}
	rec, err := events.DecodeRecord(events.Msgpack, payload)
	if err != nil {
		return nil, fetched, nil
	}
	res, err := rec.(*events.RevisionRecord).Resource()
	if err != nil {
		return nil, fetched, nil
	}
	return &res.Info, fetched, nil
}

// revisionUID is revisionOf's uid ("" for no revision), and the record
// fetched by reference, for the lanes of applyBatch.
func (w *Worker) revisionUID(ctx context.Context, msg jetstream.Msg) (string, []byte, error) {
	info, fetched, err := w.revisionOf(ctx, msg)
	if info == nil {
		return "", fetched, err
	}
	return info.UID, fetched, err
}

// applyPayload applies one record's payload to the sink; byRef allows a
// RecordRefRecord, whose payload is fetched from the object store.
func (w *Worker) applyPayload(ctx context.Context, model string, payload []byte, byRef bool) (string, error) {
	tag, err := events.PeekTag(events.Msgpack, payload)
	if err != nil {
		return "", invalid("undecodable record: %v", err)
	}
	var out sink.Outcome
	switch tag {
	case events.TagRecordRef:
		if !byRef {
			return "", invalid("a RecordRefRecord refers to another")
		}
		full, err := w.fetchRecord(ctx, payload)
		if err != nil {
			return "", err
		}
		return w.applyPayload(ctx, model, full, false)
	case events.TagMeta:
		rec, err := events.DecodeRecord(events.Msgpack, payload)
		if err != nil {
			return "", invalid("MetaRecord: %v", err)
		}
		meta, err := rec.(*events.MetaRecord).Meta()
		if err != nil {
			return "", invalid("MetaRecord data is not a valid ResourceMeta: %v", err)
		}
		if err := events.CheckID("resource_id", meta.ResourceID); err != nil {
			return "", invalid("ResourceMeta: %v", err)
		}
		out, err = w.snk.ApplyMeta(ctx, model, meta)
		if err != nil {
			return "", err
		}
		if w.asOf != nil {
			w.asOf.meta(model, meta)
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
		for _, id := range [][2]string{{"resource_id", res.Info.ResourceID}, {"revision_id", res.Info.RevisionID}} {
			if err := events.CheckID(id[0], id[1]); err != nil {
				return "", invalid("RawResource: %v", err)
			}
		}
		if res.Info.DataHash.IsSet() && !res.Info.Migrated() {
			if err := dedup.CheckDataHash(res.Info.DataHash.Value, res.RawData); err != nil {
				// Written all the same, as SpecStar would read it; but
				// worth an operator's look, as writer verify says too.
				w.m.hashMismatches.WithLabelValues(w.opts.Name).Inc()
				w.log.Warn("revision's data_hash does not match its payload (not a migration)",
					"sink", w.opts.Display, "model", model, "revision", res.Info.RevisionID, "uid", res.Info.UID, "err", err)
			}
		}
		if out, err = w.snk.ApplyRevision(ctx, model, res); err != nil {
			return "", err
		}
		if w.asOf != nil {
			w.asOf.revision(model, &res.Info)
		}
	case events.TagBlob:
		rec, err := events.DecodeRecord(events.Msgpack, payload)
		if err != nil {
			return "", invalid("BlobRecord: %v", err)
		}
		b := rec.(*events.BlobRecord)
		if out, err = w.snk.ApplyBlob(ctx, b.FileID, b.Size, b.ContentType, bytes.NewReader(b.BlobData)); err != nil {
			return "", err
		}
		if w.asOf != nil {
			w.asOf.blob(b.FileID)
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
		out, err = w.snk.ApplyBlob(ctx, ref.FileID, ref.Size, ref.ContentType, r)
		r.Close()
		if err != nil {
			return "", err
		}
		if w.asOf != nil {
			w.asOf.blob(ref.FileID)
		}
	case events.TagPurge:
		pr, err := events.DecodePurge(payload)
		if err != nil {
			return "", invalid("PurgeRecord: %v", err)
		}
		if err := events.CheckID("resource_id", pr.ResourceID); err != nil {
			return "", invalid("PurgeRecord: %v", err)
		}
		if out, err = w.snk.ApplyPurge(ctx, model, pr.ResourceID, pr.PurgedTime); err != nil {
			return "", err
		}
		if w.asOf != nil {
			w.asOf.purge(model, pr.ResourceID)
		}
	default:
		return "ignored", nil // a tag this sink has nothing to store for
	}
	return out.String(), nil
}

// fetchRecord reads the payload a RecordRefRecord refers to from the
// object store, checking its size and content address.
func (w *Worker) fetchRecord(ctx context.Context, refPayload []byte) ([]byte, error) {
	ref, err := events.DecodeRecordRef(refPayload)
	if err != nil {
		return nil, invalid("RecordRefRecord: %v", err)
	}
	if ref.Size < 0 || ref.Size > acbak.DefaultMaxFrame {
		return nil, invalid("RecordRefRecord: a record of %d bytes", ref.Size)
	}
	r, err := w.bus.OpenBlob(ctx, ref.Bucket, ref.Object)
	if (errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)) && !w.bus.IsMirror() {
		return nil, invalid("record %s is not in object store %s", ref.Object, ref.Bucket)
	}
	if err != nil {
		return nil, err // transient, or a mirror's object store lagging
	}
	defer r.Close()
	full, err := io.ReadAll(io.LimitReader(r, ref.Size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(full)) != ref.Size || events.RecordObjectName(full) != ref.Object {
		return nil, invalid("record %s in object store %s: %d bytes that do not match its name and size %d", ref.Object, ref.Bucket, len(full), ref.Size)
	}
	if tag, err := events.PeekTag(events.Msgpack, full); err != nil || tag != ref.RecordTag {
		return nil, invalid("record %s in object store %s is not the %s it should be", ref.Object, ref.Bucket, ref.RecordTag)
	}
	return full, nil
}

// Bounds of a dead letter: JetStream refuses a message whose headers
// exceed 64 KiB, so the reason and every header copied from the event are
// cut to these sizes (a reason quoting a hostile id can be four times its
// size), and when the copies still exceed maxDLQHeaders only the
// dead-letter headers are kept. The record is dead-lettered either way.
const (
	maxDLQReason      = 2048
	maxDLQHeaderValue = 4096
	maxDLQHeaders     = 48 << 10
)

// headerDLQCut names, on a dead letter, what was cut to fit it.
const headerDLQCut = "Specstar-Dlq-Cut"

// bounded cuts s to at most max bytes on a UTF-8 boundary, saying how long
// it was; it reports whether it cut.
func bounded(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	suffix := fmt.Sprintf("… (%d bytes)", len(s))
	cut := max - len(suffix)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + suffix, true
}

// deadLetterMsg is the dead letter of msg for reason, its headers bounded.
func deadLetterMsg(subject string, msg jetstream.Msg, name string, seq uint64, reason string) *nats.Msg {
	dl := nats.NewMsg(subject)
	var cut []string
	size := 0
	for k, vs := range msg.Headers() {
		for _, v := range vs {
			v, c := bounded(v, maxDLQHeaderValue)
			if c {
				cut = append(cut, k)
			}
			size += len(k) + len(v) + 4
			dl.Header.Add(k, v)
		}
	}
	if size > maxDLQHeaders {
		dl.Header = nats.Header{}
		cut = []string{"event headers"}
	}
	var c bool
	if reason, c = bounded(reason, maxDLQReason); c {
		cut = append(cut, headerDLQReason)
	}
	dl.Header.Set(headerDLQReason, reason)
	dl.Header.Set(headerDLQSink, name)
	dl.Header.Set(headerDLQSeq, strconv.FormatUint(seq, 10))
	dl.Header.Set(headerDLQSubject, msg.Subject())
	if len(cut) > 0 {
		slices.Sort(cut)
		dl.Header.Set(headerDLQCut, strings.Join(cut, ","))
	}
	// Re-dead-lettering after a crash stores it once.
	dl.Header.Set(events.HeaderMsgID, fmt.Sprintf("dlq-%s-%d", name, seq))
	dl.Data = msg.Data()
	return dl
}

// deadLetter moves an event the sink can never apply to the dead-letter
// stream, with the reason, and counts it.
func (w *Worker) deadLetter(ctx context.Context, msg jetstream.Msg, cause error) error {
	name := w.opts.Name
	seq := uint64(0)
	if md, err := msg.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	dl := deadLetterMsg(w.bus.DLQSubject(name), msg, name, seq, cause.Error())
	reason := dl.Header.Get(headerDLQReason)
	err := w.retry(ctx, "dead-letter", func() error {
		_, err := w.bus.JS.PublishMsg(ctx, dl)
		if refusedForGood(err) {
			return invalid("dead letter of stream sequence %d refused: %v", seq, err)
		}
		return err
	})
	if isPermanent(err) {
		// What the server refuses for good is the message's size (the
		// dead-letter stream's own limits): it is dead-lettered with the
		// reason and without the payload, which the event stream keeps.
		dl.Header.Set(headerDLQCut, "payload")
		r, _ := bounded(reason+"; payload left out: "+err.Error(), maxDLQReason)
		dl.Header.Set(headerDLQReason, r)
		dl.Data = nil
		err = w.retry(ctx, "dead-letter", func() error {
			_, err := w.bus.JS.PublishMsg(ctx, dl)
			return err
		})
	}
	if err != nil {
		return err
	}
	w.dead.Add(1)
	w.m.deadLetters.WithLabelValues(name).Inc()
	w.recordError(ctx, "dead-letter", errors.New(reason))
	w.log.Error("event dead-lettered", "sink", name, "stream_seq", seq, "subject", msg.Subject(), "reason", reason)
	return nil
}

// refusedForGood reports whether a publish error is the server refusing
// the message itself (its size, its headers): sending it again cannot
// succeed, unlike an unavailable stream or a timeout.
func refusedForGood(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, nats.ErrMaxPayload) || strings.Contains(err.Error(), "maximum control line exceeded") {
		return true
	}
	var ae *jetstream.APIError
	return errors.As(err, &ae) && ae.Code == 400
}

// sinkError is the last error of a sink, kept in the positions bucket so
// that Status, in another process, can show it.
type sinkError struct {
	Op    string    `json:"op"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

func sinkErrorKey(name string) string { return "sink-error." + name }

// recordError stores the sink's last error, at most once a second.
func (w *Worker) recordError(ctx context.Context, op string, err error) {
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
	if _, perr := kv.Put(ctx, sinkErrorKey(w.opts.Name), b); perr != nil {
		w.log.Debug("could not store the sink's last error", "err", perr)
	}
}
