package replicate

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
)

// deadLetterRefused dead-letters the events of msgs, a batch just made
// durable, whose revisions the sink refused only while flushing it
// (sink.Refuser: Postgres finds a uid another resource holds where it
// reads the stored rows). The rest of the batch is written, and the
// refused events are acked with it: their dead letters keep them.
func (w *Worker) deadLetterRefused(ctx context.Context, msgs []jetstream.Msg) error {
	r, ok := w.snk.(sink.Refuser)
	if !ok {
		return nil
	}
	refused := r.TakeRefusals()
	if len(refused) == 0 {
		return nil
	}
	used := map[int]bool{}
	for _, ref := range refused {
		i := refusedEvent(msgs, ref, used)
		if i < 0 {
			// Not an event of this batch (cannot happen while batches
			// are flushed one at a time); logged, never lost silently.
			w.log.Error("a revision the sink refused matches no event of its batch", "sink", w.opts.Name,
				"resource_id", ref.ResourceID, "revision_id", ref.RevisionID, "uid", ref.UID, "reason", ref.Err)
			continue
		}
		used[i] = true
		if err := w.deadLetter(ctx, msgs[i], ref.Err); err != nil {
			return err
		}
	}
	return nil
}

// refusedEvent is the index in msgs of the revision event ref names, not
// yet in used: by its resource and revision ids, and its uid where
// several events share them; -1 if none.
func refusedEvent(msgs []jetstream.Msg, ref sink.Refusal, used map[int]bool) int {
	found := -1
	for i, msg := range msgs {
		h := msg.Headers()
		if used[i] || h.Get(events.HeaderKind) != events.KindRevision ||
			h.Get(events.HeaderResourceID) != ref.ResourceID || h.Get(events.HeaderRevisionID) != ref.RevisionID {
			continue
		}
		if found < 0 {
			found = i
		}
		if uidOf(msg.Data()) == ref.UID {
			return i
		}
	}
	return found
}

// uidOf is the uid of a RevisionRecord payload ("" for anything else).
func uidOf(payload []byte) string {
	rec, err := events.DecodeRecord(events.Msgpack, payload)
	if err != nil {
		return ""
	}
	rev, ok := rec.(*events.RevisionRecord)
	if !ok {
		return ""
	}
	res, err := rev.Resource()
	if err != nil {
		return ""
	}
	return res.Info.UID
}
