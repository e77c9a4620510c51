package replicate

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/stream"
)

// Dead-letter headers, added to the original event's headers.
const (
	headerDLQReason  = "Specstar-Dlq-Reason"
	headerDLQSink    = "Specstar-Dlq-Sink"
	headerDLQSeq     = "Specstar-Dlq-Stream-Seq"
	headerDLQSubject = "Specstar-Dlq-Subject"
	headerDLQPrefix  = "Specstar-Dlq-"
)

// DeadLetter is an event a sink could never apply, as the dead-letter
// stream keeps it: the original event and why it was set aside.
type DeadLetter struct {
	Seq        uint64      // sequence in the dead-letter stream
	Time       time.Time   // when it was dead-lettered
	Sink       string      // the consumer that rejected it
	StreamSeq  uint64      // its sequence in the event stream
	Subject    string      // its subject in the event stream ("" if unknown)
	ResourceID string      // the resource it is about, if any
	Reason     string      // the sink's error
	Header     nats.Header // the original event's headers and the dead-letter ones
	Data       []byte      // the original event's payload
}

func deadLetterOf(m *jetstream.RawStreamMsg) *DeadLetter {
	seq, _ := strconv.ParseUint(m.Header.Get(headerDLQSeq), 10, 64)
	return &DeadLetter{
		Seq: m.Sequence, Time: m.Time, Sink: m.Header.Get(headerDLQSink), StreamSeq: seq,
		Subject: m.Header.Get(headerDLQSubject), ResourceID: m.Header.Get(events.HeaderResourceID),
		Reason: m.Header.Get(headerDLQReason), Header: m.Header, Data: m.Data,
	}
}

// DeadLetters walks the dead-letter stream, oldest first, only sinkName's
// if it is not "", for `replicator dlq list` and replay.
func DeadLetters(ctx context.Context, bus *stream.Bus, sinkName string) iter.Seq2[*DeadLetter, error] {
	return func(yield func(*DeadLetter, error) bool) {
		s, err := bus.JS.Stream(ctx, bus.DLQStream())
		if err != nil {
			yield(nil, fmt.Errorf("stream %s: %w", bus.DLQStream(), err))
			return
		}
		info, err := s.Info(ctx)
		if err != nil {
			yield(nil, fmt.Errorf("stream %s: %w", bus.DLQStream(), err))
			return
		}
		if info.State.Msgs == 0 {
			return
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // deleted after an earlier replay
			}
			if err != nil {
				yield(nil, fmt.Errorf("dead letter %d: %w", seq, err))
				return
			}
			if sinkName != "" && m.Header.Get(headerDLQSink) != sinkName {
				continue
			}
			if !yield(deadLetterOf(m), nil) {
				return
			}
		}
	}
}

// ReplayResult is what ReplayDeadLetters did.
type ReplayResult struct {
	Replayed    int      // dead letters re-published and removed
	LeftInPlace []uint64 // dead letters without an original subject, not replayed
	// Refused are dead letters whose subject is not an event subject of
	// this stream (a crafted or foreign header), left in place unreplayed.
	Refused []RefusedDeadLetter
}

// RefusedDeadLetter is a dead letter ReplayDeadLetters would not
// re-publish, and why.
type RefusedDeadLetter struct {
	Seq    uint64 // sequence in the dead-letter stream
	Reason string // why its subject was refused
}

// replaySubjectError says why subject is not one ReplayDeadLetters may
// publish to on bus ("" if it may): an event subject below the stream's
// prefix (PREFIX.<model>.<kind>), never another stream's, the dead-letter
// stream's included.
func replaySubjectError(bus *stream.Bus, subject string) string {
	if _, _, err := events.ParseSubject(bus.Prefix(), subject); err != nil {
		return fmt.Sprintf("its subject is not an event subject of stream %s: %v", bus.Config().Stream, err)
	}
	if strings.ContainsAny(subject, "*> \t\r\n") {
		return fmt.Sprintf("its subject %q has wildcards or white space", subject)
	}
	return ""
}

// ReplayDeadLetters re-publishes dead letters (only sinkName's if it is
// not "") to their original subjects, once the cause is fixed, and
// removes each from the dead-letter stream once JetStream has it. Every
// sink's consumer then sees them again; the others' writes are
// idempotent.
func ReplayDeadLetters(ctx context.Context, bus *stream.Bus, sinkName string) (*ReplayResult, error) {
	res := &ReplayResult{}
	s, err := bus.JS.Stream(ctx, bus.DLQStream())
	if err != nil {
		return res, fmt.Errorf("stream %s: %w", bus.DLQStream(), err)
	}
	for dl, err := range DeadLetters(ctx, bus, sinkName) {
		if err != nil {
			return res, err
		}
		if dl.Subject == "" {
			res.LeftInPlace = append(res.LeftInPlace, dl.Seq)
			continue
		}
		if why := replaySubjectError(bus, dl.Subject); why != "" {
			res.Refused = append(res.Refused, RefusedDeadLetter{Seq: dl.Seq, Reason: why})
			continue
		}
		out := nats.NewMsg(dl.Subject)
		for k, vs := range dl.Header {
			if strings.HasPrefix(k, headerDLQPrefix) {
				continue
			}
			for _, v := range vs {
				out.Header.Add(k, v)
			}
		}
		// A new id, or JetStream would drop it as the event it already has.
		out.Header.Set(events.HeaderMsgID, fmt.Sprintf("%s-replay-%d", dl.Header.Get(events.HeaderMsgID), dl.Seq))
		out.Data = dl.Data
		if _, err := bus.JS.PublishMsg(ctx, out); err != nil {
			return res, fmt.Errorf("dead letter %d: %w", dl.Seq, err)
		}
		if err := s.DeleteMsg(ctx, dl.Seq); err != nil {
			return res, fmt.Errorf("remove dead letter %d: %w", dl.Seq, err)
		}
		res.Replayed++
	}
	return res, nil
}
