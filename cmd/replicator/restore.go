package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/replicate"
)

var restoreCmd = &cli.Command{
	Name:  "replicator restore",
	Usage: "replicator restore --at TIME|--at-seq N --to URL|NAME (or --meta/--resources/--blobs) [--force] [--accept-gap] [flags]",
	Summary: `Point-in-time restore: apply to an empty sink every event the stream
stored up to --at (an RFC 3339 time, or a duration such as 2h meaning that
long ago, by the stream's own timestamps) or up to --at-seq, with the engine
of run, on a consumer of its own that is deleted afterwards; then stop and
say at which sequence and time. A time before the stream's first event is
refused naming the earliest restorable time (replicator stream info shows
it), and so is a stream whose retention removed its first events, unless
--accept-gap; a sink that holds metas is refused unless --force, which
resumes a restore at the same point or moves it to a later one: newer metas
win, so a sink still holding a later state afterwards fails with exit 1.`,
	Examples: []string{
		"replicator restore --at 2026-12-02T15:04:05Z --to /srv/restored",
		"replicator restore --at 2h --to postgres://specstar@db/restored?revisions=true --json",
		"replicator restore --at-seq 18234 --meta postgres://db/app --resources s3://bkt/{model}/data/ --blobs s3://bkt/blobs/",
	},
}

// restoreSummary is what restore prints with --json.
type restoreSummary struct {
	Sink         string    `json:"sink"`
	Consumer     string    `json:"consumer"`
	At           time.Time `json:"at,omitzero"` // the time asked for (not with --at-seq)
	Sequence     uint64    `json:"sequence"`    // the last stream sequence applied
	Time         time.Time `json:"time"`        // when the stream stored it
	FirstSeq     uint64    `json:"first_sequence"`
	Applied      int64     `json:"applied"`
	DeadLettered int64     `json:"dead_lettered"`
	Sync         string    `json:"sync,omitempty"`
	OK           bool      `json:"ok"`
}

func cmdRestore(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := restoreCmd.FlagSet(&verbose)
	var bf busFlags
	bf.registerConn(fs) // a restore creates no event stream
	var wc replicate.Config
	registerConfig(fs, &wc)
	var sa sinkArgs
	sa.register(fs, "what is written, empty: disk:/path[?options], postgres://..., s3://..., redis://..., or a deployment of --config")
	at := fs.String("at", "", "restore as of this time: RFC 3339 (2026-12-02T15:04:05Z) or a duration ago (2h)")
	atSeq := fs.Uint64("at-seq", 0, "restore up to this stream sequence instead")
	force := fs.Bool("force", false, "restore into a sink that is not empty: to resume a restore at the same point or move it to a later one (newer metas win: a sink still holding a later state fails with exit 1)")
	acceptGap := fs.Bool("accept-gap", false, "restore even though retention removed the stream's first events (the result lacks what only they held)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	pos, code, ok := restoreCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	_, specs, err := sa.resolve(fs)
	if err != nil {
		return restoreCmd.Usagef(stderr, "%v", err)
	}
	if len(pos) != 0 || len(specs) != 1 {
		return restoreCmd.Usagef(stderr, "want one --to (or --meta/--resources/--blobs) and no other arguments")
	}
	if (*at == "") == (*atSeq == 0) {
		return restoreCmd.Usagef(stderr, "want one of --at TIME and --at-seq N")
	}
	var when time.Time
	if *at != "" {
		if when, err = replicate.ParseTime(*at, time.Now()); err != nil {
			return restoreCmd.Usagef(stderr, "%v", err)
		}
	}
	spec := specs[0]
	spec.SyncPerBatchUnlessSet() // as run: a batch is acked once one syncfs made it durable
	bus, err := bf.open(ctx, nil, log, true)
	if err != nil {
		return restoreCmd.Errorf(stderr, exitError, "%v", err)
	}
	defer bus.Close()
	snk, err := spec.Open(ctx)
	if err != nil {
		return restoreCmd.Errorf(stderr, exitError, "%v", err)
	}
	res, err := replicate.Restore(ctx, bus, snk, replicate.RestoreOptions{
		Config: wc, At: when, AtSeq: *atSeq, AcceptGap: *acceptGap, Force: *force,
		Name: spec.Name, Display: spec.Raw, Models: spec.Models, Logger: log,
	})
	if cerr := snk.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close sink %s: %w", spec.Raw, cerr)
	}
	if res == nil { // refused before anything was written
		var notEmpty *replicate.NotEmptyError
		if errors.As(err, &notEmpty) {
			return restoreCmd.Errorf(stderr, exitError, "%v", err)
		}
		return restoreCmd.Fail(stderr, cli.InputCode(err), "", err)
	}
	sum := restoreSummary{Sink: spec.Raw, Consumer: res.Consumer, At: when, Sequence: res.Point.Seq, Time: res.Point.Time,
		FirstSeq: res.FirstSeq, Applied: res.Applied - res.DeadLettered, DeadLettered: res.DeadLettered, Sync: spec.Sync(),
		OK: err == nil && res.DeadLettered == 0}
	if *asJSON {
		cli.JSON(stdout, sum)
	} else {
		fmt.Fprintf(stdout, "restored sink %s as of sequence %d (stored %s): sequences %d..%d, %d events applied, %d dead-lettered\n",
			sum.Sink, sum.Sequence, sum.Time.UTC().Format(time.RFC3339Nano), sum.FirstSeq, sum.Sequence, sum.Applied, sum.DeadLettered)
	}
	var later *replicate.LaterStateError
	switch {
	case errors.As(err, &later):
		return restoreCmd.Errorf(stderr, exitDiffer, "%v", err)
	case err != nil:
		return restoreCmd.Errorf(stderr, exitError, "%v", err)
	case res.DeadLettered > 0:
		return restoreCmd.Errorf(stderr, exitDiffer, "%d events could not be applied and were dead-lettered (the sink lacks them): replicator dlq list --consumer %s", res.DeadLettered, res.Consumer)
	}
	return exitOK
}
