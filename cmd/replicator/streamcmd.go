package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// cmdStream is `replicator stream info|apply`: the event stream's
// settings shown, and changed only when asked.
func cmdStream(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	if len(args) == 0 || (args[0] != "info" && args[0] != "apply") {
		fmt.Fprintln(stderr, "usage: replicator stream info [--json] | replicator stream apply [--max-age D] [--max-bytes N] [--duplicate-window D] [--retention R] [--replicas N] [--subject-prefix P]")
		return exitUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("stream "+sub, flag.ContinueOnError)
	var bf busFlags
	bf.register(fs)
	var cf configOnly
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the settings and state as JSON")
	pos, ok := parse(fs, args[1:], stderr)
	if !ok || len(pos) != 0 {
		return exitUsage
	}
	if err := cf.apply(fs); err != nil {
		fmt.Fprintf(stderr, "replicator stream %s: %v\n", sub, err)
		return exitUsage
	}
	// Open adopts the stream's settings; apply then changes the ones
	// given on the command line, and only those.
	change := bf.cfg
	bus, err := bf.open(ctx, nil, log, sub == "info")
	if err != nil {
		fmt.Fprintf(stderr, "replicator stream %s: %v\n", sub, err)
		return exitFailed
	}
	defer bus.Close()
	if sub == "apply" {
		change.Given = map[string]bool{}
		fs.Visit(func(f *flag.Flag) { change.Given[f.Name] = true })
		if _, err := bus.Apply(ctx, change); err != nil {
			fmt.Fprintf(stderr, "replicator stream apply: %v\n", err)
			return exitFailed
		}
	}
	info, err := bus.Stream.Info(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "replicator stream %s: %v\n", sub, err)
		return exitFailed
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(info)
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
}
