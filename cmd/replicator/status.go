package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/specstar/replicator/replicate"
)

// cmdStatus prints every sink consumer's replicate.Status.
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
	bus, err := bf.open(ctx, fs, log, true)
	if err != nil {
		fmt.Fprintf(stderr, "replicator status: %v\n", err)
		return exitFailed
	}
	defer bus.Close()
	sts, err := replicate.Status(ctx, bus)
	if err != nil {
		fmt.Fprintf(stderr, "replicator status: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if sts == nil {
			sts = []replicate.SinkStatus{}
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
