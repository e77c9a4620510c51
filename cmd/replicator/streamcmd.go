package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/stream"
)

var streamInfoCmd = &cli.Command{
	Name:     "replicator stream info",
	Usage:    "replicator stream info [--json] [flags]",
	Summary:  "The event stream's settings and state, and the earliest time replicator restore can restore (the first event's, saying whether retention or a purge of the stream dropped events before it).",
	Examples: []string{"replicator stream info", "replicator stream info --nats nats://nats:4222 --json"},
}

var streamApplyCmd = &cli.Command{
	Name:  "replicator stream apply",
	Usage: "replicator stream apply [--max-age D] [--max-bytes N] [--duplicate-window D] [--retention R] [--replicas N] [flags]",
	Summary: `Change the settings given, and only those. No other command changes an
existing stream: one given a stream flag that differs from the stream
fails, naming the setting.`,
	Examples: []string{"replicator stream apply --max-age 720h", "replicator stream apply --duplicate-window 2h --json"},
}

func cmdStreamInfo(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	return cmdStream(ctx, streamInfoCmd, "info", args, stdout, stderr, log)
}

func cmdStreamApply(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	return cmdStream(ctx, streamApplyCmd, "apply", args, stdout, stderr, log)
}

// cmdStream is `replicator stream info|apply`: the event stream's
// settings shown, and changed only when asked.
func cmdStream(ctx context.Context, c *cli.Command, sub string, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := c.FlagSet(&verbose)
	var bf busFlags
	if sub == "info" {
		bf.registerConn(fs) // reads only
	} else {
		bf.register(fs)
	}
	var cf configOnly
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the settings and state as JSON")
	pos, code, ok := c.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.Usagef(stderr, "unexpected arguments %q", pos)
	}
	if _, err := cf.load(fs); err != nil {
		return c.Usagef(stderr, "%v", err)
	}
	// Open adopts the stream's settings; apply then changes the ones
	// given on the command line, and only those.
	change := bf.cfg
	bus, err := bf.open(ctx, nil, log, sub == "info")
	if err != nil {
		return c.Fail(stderr, exitError, "", err)
	}
	defer bus.Close()
	if sub == "apply" {
		change.Given = map[string]bool{}
		fs.Visit(func(f *flag.Flag) { change.Given[f.Name] = true })
		delete(change.Given, "v")
		if _, err := bus.Apply(ctx, change); err != nil {
			return c.Fail(stderr, exitError, "", err)
		}
		// The buckets beside the stream, so that the writer and the
		// replicators, whose NATS users may not create streams (least
		// privilege), find them.
		if err := ensureBuckets(ctx, bus); err != nil {
			return c.Fail(stderr, exitError, "", err)
		}
	}
	info, err := bus.Stream.Info(ctx)
	if err != nil {
		return c.Fail(stderr, exitError, "", err)
	}
	if *asJSON {
		// JetStream's own object, with what a restore can reach beside it.
		cli.JSON(stdout, struct {
			*jetstream.StreamInfo
			Restore *replicate.Restorable `json:"restore"`
		}{info, replicate.RestorableOf(info)})
		return exitOK
	}
	printStream(stdout, info)
	return exitOK
}

// printStream writes a stream's settings and state for people.
func printStream(w io.Writer, info *jetstream.StreamInfo) {
	c := info.Config
	limit := func(v string, unlimited bool) string {
		if unlimited {
			return "unlimited"
		}
		return v
	}
	fmt.Fprintf(w, "stream %s\n", c.Name)
	if c.Mirror != nil {
		fmt.Fprintf(w, "  mirror-of         %s\n", c.Mirror.Name)
	} else {
		fmt.Fprintf(w, "  subjects          %s\n", strings.Join(c.Subjects, ", "))
	}
	fmt.Fprintf(w, "  retention         %v\n", c.Retention)
	fmt.Fprintf(w, "  max-age           %s\n", limit(c.MaxAge.String(), c.MaxAge == 0))
	fmt.Fprintf(w, "  max-bytes         %s\n", limit(fmt.Sprint(c.MaxBytes), c.MaxBytes <= 0))
	fmt.Fprintf(w, "  duplicate-window  %s\n", c.Duplicates)
	fmt.Fprintf(w, "  replicas          %d\n", c.Replicas)
	fmt.Fprintf(w, "  messages          %d (%d bytes), sequences %d..%d\n", info.State.Msgs, info.State.Bytes, info.State.FirstSeq, info.State.LastSeq)
	fmt.Fprintf(w, "  restorable from   %s\n", replicate.RestorableOf(info).Summary())
}

// ensureBuckets creates the positions bucket and, on the origin, the blob
// object store (a mirror's blob copy is made when its bus opens).
func ensureBuckets(ctx context.Context, bus *stream.Bus) error {
	if _, err := bus.Positions(ctx); err != nil {
		return err
	}
	if bus.IsMirror() {
		return nil
	}
	_, err := bus.Blobs(ctx)
	return err
}
