package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/stream"
)

var statusCmd = &cli.Command{
	Name:    "replicator status",
	Usage:   "replicator status [--json] [flags]",
	Summary: "Per sink consumer: pending events, ack floor, oldest unacked event's age, redeliveries and dead letters.",
	Examples: []string{
		"replicator status",
		"replicator status --config region-b.yaml --json",
	},
}

// cmdStatus prints every sink consumer's replicate.Status.
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := statusCmd.FlagSet(&verbose)
	var bf busFlags
	bf.registerConn(fs)
	var cf configOnly
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, code, ok := statusCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return statusCmd.Usagef(stderr, "unexpected arguments %q", pos)
	}
	if _, err := cf.load(fs); err != nil {
		return statusCmd.Usagef(stderr, "%v", err)
	}
	bus, err := bf.open(ctx, fs, log, true)
	if err != nil {
		return statusCmd.Errorf(stderr, exitError, "%v", err)
	}
	defer bus.Close()
	sts, err := replicate.Status(ctx, bus)
	if err != nil {
		return statusCmd.Errorf(stderr, exitError, "%v", err)
	}
	holes, err := streamHoles(ctx, bus)
	if err != nil {
		return statusCmd.Errorf(stderr, exitError, "%v", err)
	}
	if *asJSON {
		if sts == nil {
			sts = []replicate.SinkStatus{}
		}
		out := map[string]any{"stream": bus.Config().Stream, "sinks": sts, "deleted_events": uint64(0)}
		if holes != nil {
			out["deleted_events"], out["deleted"] = holes.Count, holes.String()
		}
		cli.JSON(stdout, out)
		return exitOK
	}
	if holes != nil {
		fmt.Fprintf(stdout, "stream %s lacks %s deleted from between its first and last event: a sink past them lacks what only they held (replicator reconcile --from SOURCE repairs it)\n", holes.Stream, holes)
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

// streamHoles are replicate.StreamHoles of the stream bus serves.
func streamHoles(ctx context.Context, bus *stream.Bus) (*replicate.Holes, error) {
	info, err := bus.Stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", bus.Config().Stream, err)
	}
	return replicate.StreamHoles(ctx, bus, info)
}
