package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/stream"
)

// deadLetters walks the dead-letter stream, oldest first, optionally only
// one sink's.
func deadLetters(ctx context.Context, bus *stream.Bus, sinkName string) iter.Seq2[*jetstream.RawStreamMsg, error] {
	return func(yield func(*jetstream.RawStreamMsg, error) bool) {
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
			if !yield(m, nil) {
				return
			}
		}
	}
}

func openBusFor(ctx context.Context, name string, args []string, stderr io.Writer, log *slog.Logger) (*stream.Bus, string, int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var bf busFlags
	bf.register(fs)
	var cf configOnly
	cf.register(fs)
	sinkName := fs.String("sink", "", "only this sink's dead letters (its consumer name)")
	pos, ok := parse(fs, args, stderr)
	if !ok || len(pos) != 0 {
		fmt.Fprintf(stderr, "replicator %s: unexpected arguments\n", name)
		return nil, "", exitUsage
	}
	if err := cf.apply(fs); err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", name, err)
		return nil, "", exitUsage
	}
	bus, err := stream.Open(ctx, bf.cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", name, err)
		return nil, "", exitFailed
	}
	return bus, *sinkName, exitOK
}

func cmdDLQList(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	bus, sinkName, code := openBusFor(ctx, "dlq list", args, stderr, log)
	if code != exitOK {
		return code
	}
	defer bus.Close()
	n := 0
	for m, err := range deadLetters(ctx, bus, sinkName) {
		if err != nil {
			fmt.Fprintf(stderr, "replicator dlq list: %v\n", err)
			return exitFailed
		}
		n++
		fmt.Fprintf(stdout, "%d\t%s\tsink=%s\tstream_seq=%s\tsubject=%s\tresource=%s\treason=%s\n",
			m.Sequence, m.Time.UTC().Format("2006-01-02T15:04:05Z"), m.Header.Get(headerDLQSink), m.Header.Get(headerDLQSeq),
			m.Header.Get(headerDLQSubject), m.Header.Get(events.HeaderResourceID), m.Header.Get(headerDLQReason))
	}
	fmt.Fprintf(stdout, "%d dead letters\n", n)
	return exitOK
}

// cmdDLQReplay re-publishes dead letters to their original subjects (every
// sink's consumer then sees them again; the others' writes are idempotent)
// and removes them from the dead-letter stream once JetStream has them.
func cmdDLQReplay(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	bus, sinkName, code := openBusFor(ctx, "dlq replay", args, stderr, log)
	if code != exitOK {
		return code
	}
	defer bus.Close()
	s, err := bus.JS.Stream(ctx, bus.DLQStream())
	if err != nil {
		fmt.Fprintf(stderr, "replicator dlq replay: %v\n", err)
		return exitFailed
	}
	n := 0
	for m, err := range deadLetters(ctx, bus, sinkName) {
		if err != nil {
			fmt.Fprintf(stderr, "replicator dlq replay: %v\n", err)
			return exitFailed
		}
		subject := m.Header.Get(headerDLQSubject)
		if subject == "" {
			fmt.Fprintf(stderr, "replicator dlq replay: dead letter %d has no original subject; left in place\n", m.Sequence)
			continue
		}
		out := nats.NewMsg(subject)
		for k, vs := range m.Header {
			if strings.HasPrefix(k, "Specstar-Dlq-") {
				continue
			}
			for _, v := range vs {
				out.Header.Add(k, v)
			}
		}
		// A new id, or JetStream would drop it as the event it already has.
		out.Header.Set(events.HeaderMsgID, fmt.Sprintf("%s-replay-%d", m.Header.Get(events.HeaderMsgID), m.Sequence))
		out.Data = m.Data
		if _, err := bus.JS.PublishMsg(ctx, out); err != nil {
			fmt.Fprintf(stderr, "replicator dlq replay: dead letter %d: %v\n", m.Sequence, err)
			return exitFailed
		}
		if err := s.DeleteMsg(ctx, m.Sequence); err != nil {
			fmt.Fprintf(stderr, "replicator dlq replay: remove dead letter %d: %v\n", m.Sequence, err)
			return exitFailed
		}
		n++
	}
	fmt.Fprintf(stdout, "%d dead letters re-published\n", n)
	return exitOK
}
