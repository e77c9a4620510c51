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
	revs, err := w.batchRevisions(ctx, msgs)
	if err != nil {
		return err
	}
	for _, ref := range refused {
		i := refusedEvent(revs, ref, used)
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

// batchRevisions is the RevisionInfo of each revision event of msgs, by
// index, read from the payloads the sink applied (those sent by reference
// fetched again: refusals are rare), nil for any other event: a header
// can differ from its payload (the NATS client trims a trailing space
// from a value; a publisher may send none), the payload cannot. It fails
// only when ctx ends.
func (w *Worker) batchRevisions(ctx context.Context, msgs []jetstream.Msg) ([]*events.RevisionInfo, error) {
	out := make([]*events.RevisionInfo, len(msgs))
	for i, msg := range msgs {
		info, _, err := w.revisionOf(ctx, msg)
		if err != nil {
			return nil, err
		}
		out[i] = info
	}
	return out, nil
}

// refusedEvent is the index in revs (see batchRevisions) of the revision
// ref names, not yet in used: by its resource id, revision id and uid; -1
// if none.
func refusedEvent(revs []*events.RevisionInfo, ref sink.Refusal, used map[int]bool) int {
	for i, info := range revs {
		if info != nil && !used[i] && info.ResourceID == ref.ResourceID && info.RevisionID == ref.RevisionID && info.UID == ref.UID {
			return i
		}
	}
	return -1
}
