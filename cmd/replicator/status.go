package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/stream"
)

// sinkStatus is what `replicator status` reports for one sink's consumer.
type sinkStatus struct {
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

// sinkStatuses reads every durable consumer of the stream.
func sinkStatuses(ctx context.Context, bus *stream.Bus) ([]sinkStatus, error) {
	sinfo, err := bus.Stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream info: %w", err)
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
	var out []sinkStatus
	lister := bus.Stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		st := sinkStatus{
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
		return nil, fmt.Errorf("list consumers: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var bf busFlags
	bf.register(fs)
	var cf configOnly
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, ok := parse(fs, args, stderr)
	if !ok || len(pos) != 0 {
		return exitUsage
	}
	if err := cf.apply(fs); err != nil {
		fmt.Fprintf(stderr, "replicator status: %v\n", err)
		return exitUsage
	}
	bus, err := stream.Open(ctx, bf.cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "replicator status: %v\n", err)
		return exitFailed
	}
	defer bus.Close()
	sts, err := sinkStatuses(ctx, bus)
	if err != nil {
		fmt.Fprintf(stderr, "replicator status: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if sts == nil {
			sts = []sinkStatus{}
		}
		enc.Encode(map[string]any{"stream": bus.Config().Stream, "sinks": sts})
		return exitOK
	}
	if len(sts) == 0 {
		fmt.Fprintf(stdout, "stream %s has no sink consumers\n", bus.Config().Stream)
		return exitOK
	}
	for _, s := range sts {
		age := "none"
		if s.OldestUnacked != "" {
			age = (time.Duration(s.OldestAgeSec) * time.Second).String()
		}
		fmt.Fprintf(stdout, "%s (%s): pending %d, awaiting ack %d, ack floor %d of %d, oldest unacked %s, redelivered %d, dead letters %d\n",
			s.Name, s.Description, s.Pending, s.AckPending, s.AckFloor, s.StreamLast, age, s.Redelivered, s.DeadLetters)
		if s.LastError != "" {
			fmt.Fprintf(stdout, "    last error at %s: %s\n", s.LastErrorAt, s.LastError)
		}
	}
	return exitOK
}
