package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/stream"
)

// openBusFor parses the flags of a dlq command and opens the stream.
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
	bus, err := bf.open(ctx, fs, log, true)
	if err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", name, err)
		return nil, "", exitFailed
	}
	return bus, *sinkName, exitOK
}

// cmdDLQList prints the dead letters with their reasons.
func cmdDLQList(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	bus, sinkName, code := openBusFor(ctx, "dlq list", args, stderr, log)
	if code != exitOK {
		return code
	}
	defer bus.Close()
	n := 0
	for dl, err := range replicate.DeadLetters(ctx, bus, sinkName) {
		if err != nil {
			fmt.Fprintf(stderr, "replicator dlq list: %v\n", err)
			return exitFailed
		}
		n++
		fmt.Fprintf(stdout, "%d\t%s\tsink=%s\tstream_seq=%d\tsubject=%s\tresource=%s\treason=%s\n",
			dl.Seq, dl.Time.UTC().Format("2006-01-02T15:04:05Z"), dl.Sink, dl.StreamSeq, dl.Subject, dl.ResourceID, dl.Reason)
	}
	fmt.Fprintf(stdout, "%d dead letters\n", n)
	return exitOK
}

// cmdDLQReplay re-publishes dead letters to their original subjects and
// removes them (replicate.ReplayDeadLetters).
func cmdDLQReplay(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	bus, sinkName, code := openBusFor(ctx, "dlq replay", args, stderr, log)
	if code != exitOK {
		return code
	}
	defer bus.Close()
	res, err := replicate.ReplayDeadLetters(ctx, bus, sinkName)
	for _, seq := range res.LeftInPlace {
		fmt.Fprintf(stderr, "replicator dlq replay: dead letter %d has no original subject; left in place\n", seq)
	}
	if err != nil {
		fmt.Fprintf(stderr, "replicator dlq replay: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "%d dead letters re-published\n", res.Replayed)
	return exitOK
}
