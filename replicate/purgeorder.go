package replicate

// Purges across processes. Several processes (or workers) may share one
// sink's durable consumer, each applying the batches JetStream hands it.
// Metas (newer wins) and revisions and blobs (content addresses) converge
// in any order, but a purge does not: applied before an older meta or
// revision of the same resource that another process still holds, it
// finds nothing to remove, and that older record then re-creates the
// resource. So a purge is applied only once everything before it on the
// stream has been acknowledged, by whichever process held it.

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
)

// segment is a run of a batch applied, made durable and acked together;
// after, when not zero, is the stream sequence of its first event, a
// purge, which waits until every earlier event is acknowledged.
type segment struct {
	msgs  []jetstream.Msg
	after uint64
}

// seqOf is an event's stream sequence (0 if its metadata cannot be read).
func seqOf(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

func isPurge(m jetstream.Msg) bool {
	return strings.HasSuffix(m.Subject(), "."+events.KindPurge)
}

// segments puts a batch in stream order (a redelivered event may come
// before newer ones) and cuts it before every run of purges with
// consecutive sequences and after it. A batch without purges is one
// segment, so the usual batch is applied as before.
func segments(msgs []jetstream.Msg) []segment {
	if !slices.ContainsFunc(msgs, isPurge) {
		return []segment{{msgs: msgs}}
	}
	msgs = slices.Clone(msgs)
	slices.SortStableFunc(msgs, func(a, b jetstream.Msg) int {
		sa, sb := seqOf(a), seqOf(b)
		switch {
		case sa < sb:
			return -1
		case sa > sb:
			return 1
		}
		return 0
	})
	var out []segment
	for i := 0; i < len(msgs); {
		j := i + 1
		if isPurge(msgs[i]) {
			for j < len(msgs) && isPurge(msgs[j]) && seqOf(msgs[j]) == seqOf(msgs[j-1])+1 {
				j++
			}
			out = append(out, segment{msgs: msgs[i:j], after: seqOf(msgs[i])})
		} else {
			for j < len(msgs) && !isPurge(msgs[j]) {
				j++
			}
			out = append(out, segment{msgs: msgs[i:j]})
		}
		i = j
	}
	return out
}

// processInOrder applies a batch segment by segment (see segments),
// holding each purge until every event before it on the stream is
// acknowledged; it returns the highest stream sequence acked.
func (w *Worker) processInOrder(ctx context.Context, cons jetstream.Consumer, msgs []jetstream.Msg) (uint64, error) {
	var last uint64
	segs := segments(msgs)
	for i, s := range segs {
		if s.after > 0 {
			held := 0
			for _, r := range segs[i:] {
				held += len(r.msgs)
			}
			if err := w.awaitEarlier(ctx, cons, s.after, held, segs[i:]); err != nil {
				return last, err
			}
		}
		l, err := w.process(ctx, s.msgs)
		last = max(last, l)
		if err != nil {
			return last, err
		}
	}
	return last, nil
}

// awaitEarlier waits until no event before stream sequence seq awaits an
// acknowledgement: the consumer's ack floor has reached seq-1, or the only
// events awaiting one are the held ones of this batch (a filtered
// consumer's floor may stay below events it never delivers). Meanwhile it
// tells JetStream the held events are in progress, so they are not
// redelivered to another process for waiting here.
func (w *Worker) awaitEarlier(ctx context.Context, cons jetstream.Consumer, seq uint64, held int, rest []segment) error {
	if seq <= 1 {
		return nil
	}
	start := time.Now()
	lastProgress, said := start, start
	for {
		info, err := cons.Info(ctx)
		if err == nil && (info.AckFloor.Stream >= seq-1 || info.NumAckPending <= held) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			w.log.Warn("consumer info failed while a purge waits; retrying", "sink", w.opts.Name, "err", err)
		}
		if w.opts.AckWait > 0 && time.Since(lastProgress) > w.opts.AckWait/3 {
			lastProgress = time.Now()
			for _, s := range rest {
				for _, m := range s.msgs {
					_ = m.InProgress()
				}
			}
		}
		if time.Since(said) > 10*time.Second {
			said = time.Now()
			w.log.Info("a purge waits for earlier events other processes hold", "sink", w.opts.Display, "sequence", seq, "waited", time.Since(start).Round(time.Second).String())
		}
		sleep(ctx, 20*time.Millisecond)
	}
}
