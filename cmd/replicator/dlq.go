package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

var dlqListCmd = &cli.Command{
	Name:    "replicator dlq list",
	Usage:   "replicator dlq list [--consumer NAME] [--json] [flags]",
	Summary: "Show dead-lettered events with their reasons, of every sink or of one sink's consumer.",
	Examples: []string{
		"replicator dlq list",
		"replicator dlq list --consumer sink-disk-3f2a1b --json",
	},
}

var dlqReplayCmd = &cli.Command{
	Name:    "replicator dlq replay",
	Usage:   "replicator dlq replay [--consumer NAME] [flags]",
	Summary: "Re-publish dead-lettered events to the stream and remove them.",
	Examples: []string{
		"replicator dlq replay",
		"replicator dlq replay --consumer sink-disk-3f2a1b",
	},
}

// openDLQ parses the flags of a dlq command and opens the stream; the
// consumer is --consumer, or the consumer of the sink the deprecated
// --sink names (a consumer name, a sink URL or path, or a deployment).
func openDLQ(ctx context.Context, c *cli.Command, args []string, stdout, stderr io.Writer, log *slog.Logger) (*stream.Bus, string, bool, int) {
	var verbose bool
	fs := c.FlagSet(&verbose)
	var bf busFlags
	if c == dlqListCmd {
		bf.registerConn(fs) // reads only
	} else {
		bf.register(fs)
	}
	var cf configOnly
	cf.register(fs)
	consumer := fs.String("consumer", "", "only this sink consumer's dead letters (its name, as status shows it)")
	sinkName := fs.String("sink", "", cli.DeprecatedMark+"--consumer) the sink whose dead letters: a consumer name, a sink URL or path, or a deployment of --config")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if c != dlqListCmd {
		asJSON = new(bool)
	}
	pos, code, ok := c.Parse(fs, args, stdout, stderr)
	if !ok {
		return nil, "", false, code
	}
	if len(pos) != 0 {
		return nil, "", false, c.Usagef(stderr, "unexpected arguments %q", pos)
	}
	cfg, err := cf.load(fs)
	if err != nil {
		return nil, "", false, c.Usagef(stderr, "%v", err)
	}
	name := *consumer
	if *sinkName != "" {
		cli.Deprecated(stderr, c.Name, "--sink", "--consumer")
		if name != "" {
			return nil, "", false, c.Usagef(stderr, "give --consumer or --sink, not both")
		}
		name = consumerOf(cfg, *sinkName)
	}
	bus, err := bf.open(ctx, fs, log, true)
	if err != nil {
		return nil, "", false, c.Errorf(stderr, exitError, "%v", err)
	}
	return bus, name, *asJSON, exitOK
}

// consumerOf is the consumer name of what --sink names: the sink of a URL,
// path or deployment, else the value itself (a consumer name).
func consumerOf(cfg *deployment.Config, v string) string {
	if d, ok, err := cfg.Lookup(v); ok && err == nil {
		if spec, err := sinkFromDeployment(d); err == nil {
			return spec.Name
		}
	}
	_, statErr := os.Stat(strings.TrimPrefix(v, "disk:"))
	if statErr == nil || strings.ContainsAny(v, "/:") {
		if spec, err := sink.Parse(v); err == nil {
			return spec.Name
		}
	}
	return v
}

// cmdDLQList prints the dead letters with their reasons.
func cmdDLQList(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	bus, name, asJSON, code := openDLQ(ctx, dlqListCmd, args, stdout, stderr, log)
	if code != exitOK || bus == nil {
		return code
	}
	defer bus.Close()
	list := []*replicate.DeadLetter{}
	for dl, err := range replicate.DeadLetters(ctx, bus, name) {
		if err != nil {
			return dlqListCmd.Errorf(stderr, exitError, "%v", err)
		}
		list = append(list, dl)
	}
	if asJSON {
		cli.JSON(stdout, map[string]any{"consumer": name, "count": len(list), "dead_letters": list})
		return exitOK
	}
	for _, dl := range list {
		fmt.Fprintf(stdout, "%d\t%s\tsink=%s\tstream_seq=%d\tsubject=%s\tresource=%s\treason=%s\n",
			dl.Seq, dl.Time.UTC().Format("2006-01-02T15:04:05Z"), dl.Sink, dl.StreamSeq, dl.Subject, dl.ResourceID, dl.Reason)
	}
	fmt.Fprintf(stdout, "%d dead letters\n", len(list))
	return exitOK
}

// cmdDLQReplay re-publishes dead letters to their original subjects and
// removes them (replicate.ReplayDeadLetters).
func cmdDLQReplay(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	bus, name, _, code := openDLQ(ctx, dlqReplayCmd, args, stdout, stderr, log)
	if code != exitOK || bus == nil {
		return code
	}
	defer bus.Close()
	res, err := replicate.ReplayDeadLetters(ctx, bus, name)
	for _, seq := range res.LeftInPlace {
		fmt.Fprintf(stderr, "replicator dlq replay: dead letter %d has no original subject; left in place\n", seq)
	}
	for _, r := range res.Refused {
		fmt.Fprintf(stderr, "replicator dlq replay: dead letter %d not re-published: %s; left in place\n", r.Seq, r.Reason)
	}
	if err != nil {
		return dlqReplayCmd.Errorf(stderr, exitError, "%v", err)
	}
	fmt.Fprintf(stdout, "%d dead letters re-published\n", res.Replayed)
	if len(res.Refused) > 0 {
		return dlqReplayCmd.Errorf(stderr, exitError, "%d dead letters name a subject outside stream %s; left in place", len(res.Refused), bus.Config().Stream)
	}
	return exitOK
}
