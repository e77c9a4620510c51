package replicate

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/stream"
)

// SinkStatus is one sink's consumer as an operator sees it, read from the
// stream alone (another process may be running the sink).
type SinkStatus struct {
	Name          string  `json:"name"`
	Description   string  `json:"description"`
	Pending       uint64  `json:"pending"`        // in the stream, not yet delivered
	AckPending    int     `json:"ack_pending"`    // delivered, not yet acked
	AckFloor      uint64  `json:"ack_floor"`      // stream sequence below which all is acked
	StreamLast    uint64  `json:"stream_last"`    // the stream's last sequence
	OldestUnacked string  `json:"oldest_unacked"` // when the first unacked event was stored (RFC 3339), "" if none
	OldestAgeSec  float64 `json:"oldest_unacked_age_seconds"`
	Redelivered   int     `json:"redelivered"`
	DeadLetters   uint64  `json:"dead_letters"`
	LastError     string  `json:"last_error,omitempty"`    // the sink's last retried error or dead-letter reason
	LastErrorAt   string  `json:"last_error_at,omitempty"` // RFC 3339
}

// Status reads every durable consumer of the stream, sorted by name, for
// `replicator status` and for anyone watching a deployment's sinks.
func Status(ctx context.Context, bus *stream.Bus) ([]SinkStatus, error) {
	sinfo, err := bus.Stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", bus.Config().Stream, err)
	}
	dead := map[string]uint64{}
	if dlq, err := bus.JS.Stream(ctx, bus.DLQStream()); err == nil {
		if di, err := dlq.Info(ctx, jetstream.WithSubjectFilter(bus.DLQSubjects())); err == nil {
			for subj, n := range di.State.Subjects {
				tok := subj[strings.LastIndex(subj, ".")+1:]
				if name, err := events.ParseSubjectToken(tok); err == nil {
					dead[name] += n
				}
			}
		}
	}
	var out []SinkStatus
	lister := bus.Stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		st := SinkStatus{
			Name: ci.Name, Description: ci.Config.Description,
			Pending: ci.NumPending, AckPending: ci.NumAckPending, AckFloor: ci.AckFloor.Stream,
			StreamLast: sinfo.State.LastSeq, Redelivered: ci.NumRedelivered, DeadLetters: dead[ci.Name],
		}
		if kv, err := bus.Positions(ctx); err == nil {
			if e, err := kv.Get(ctx, sinkErrorKey(ci.Name)); err == nil {
				var se sinkError
				if json.Unmarshal(e.Value(), &se) == nil {
					st.LastError = se.Op + ": " + se.Error
					st.LastErrorAt = se.At.Format(time.RFC3339)
				}
			}
		}
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			// The oldest event not yet acked is the first after the floor
			// (on a filtered consumer, the first after it on its subjects).
			if m, err := bus.Stream.GetMsg(ctx, ci.AckFloor.Stream+1); err == nil {
				st.OldestUnacked = m.Time.UTC().Format(time.RFC3339)
				st.OldestAgeSec = time.Since(m.Time).Seconds()
			}
		}
		out = append(out, st)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("stream %s: list consumers: %w", bus.Config().Stream, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
