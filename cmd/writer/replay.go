package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/cli"
	specdeploy "github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

var replayCmd = &cli.Command{
	Name:  "writer replay",
	Usage: "writer replay --from ARCHIVE [--nats URL] [--stream NAME] [--data-dir DIR] [--max-inflight N] [--json]",
	Summary: `Publish every record of the archive, in order, as events on the
JetStream stream (an embedded server when no URL is given), after checking
the whole archive. Re-publishing stores nothing new: events carry
deterministic ids.`,
	Examples: []string{"writer replay --from dump.acbak --nats nats://nats:4222", "writer replay --from dump.acbak --json"},
}

// replayResult is what replay prints with --json.
type replayResult struct {
	Archive    string   `json:"archive"`
	Stream     string   `json:"stream"`
	Seconds    float64  `json:"seconds"`
	Frames     int      `json:"frames"`
	Bytes      int64    `json:"bytes"`
	Metas      int      `json:"metas"`
	Revisions  int      `json:"revisions"`
	Blobs      int      `json:"blobs"`
	LargeBlobs int      `json:"large_blobs"`
	Unknown    int      `json:"unknown"`
	Stored     int64    `json:"stored"`
	Duplicates int64    `json:"duplicates"`
	Warnings   []string `json:"warnings"`
}

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := replayCmd.FlagSet(&verbose)
	var a archiveFlags
	a.register(fs, false)
	var cfg stream.Config
	fs.StringVar(&cfg.URL, "nats", os.Getenv("NATS_URL"), "NATS server URL (default $NATS_URL; empty runs an embedded JetStream server)")
	fs.StringVar(&cfg.Stream, "stream", "SPECSTAR", "JetStream stream name")
	fs.StringVar(&cfg.SubjectPrefix, "subject-prefix", "specstar", "subject prefix of events")
	fs.StringVar(&cfg.DataDir, "data-dir", stream.DefaultDataDir(), "embedded server's data directory")
	cfg.RegisterSyncInterval(fs)
	cfg.Auth.Register(fs)
	fs.IntVar(&cfg.Replicas, "replicas", 1, "stream replicas (clustered servers)")
	configPath := fs.String("config", os.Getenv("SPECSTAR_CONFIG"), "YAML file with nats settings (default $SPECSTAR_CONFIG), as every command takes")
	fs.DurationVar(&cfg.DuplicateWindow, "duplicate-window", time.Hour, "how long JetStream drops re-published records by message id")
	inflight := fs.Int("max-inflight", 512, "published events awaiting their acknowledgement at most")
	noCheck := fs.Bool("no-check", false, "publish while reading, without checking the whole archive first (a bad archive may then leave records on the stream)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	pos, code, ok := replayCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	path, code, ok := a.path(replayCmd, pos, stderr)
	if !ok {
		return code
	}
	if *configPath != "" {
		c, err := specdeploy.Load(*configPath)
		if err == nil {
			err = c.ApplyFlags(fs)
		}
		if err != nil {
			return replayCmd.Usagef(stderr, "%v", err)
		}
	}
	f, opts, err := openArchive(path, a)
	if err != nil {
		return replayCmd.Fail(stderr, exitInvalid, "", err)
	}
	defer f.Close()
	switch {
	case opts.Size == 0 && !*noCheck:
		// A pipe cannot be read twice: say so rather than pretend.
		log.Warn("reading the archive from a pipe: it is published as it is read, so if it turns out bad, the records before the fault are already on the stream", "archive", path)
	case !*noCheck:
		// Publish nothing from an archive `writer verify` would reject.
		if code := precheck(ctx, f, path, opts, stderr, log); code != exitOK {
			return code
		}
	}
	bus, err := stream.Open(ctx, givenIn(fs, cfg), log)
	if err != nil {
		return replayCmd.Errorf(stderr, exitError, "%v", err)
	}
	defer bus.Close()
	start := time.Now()
	meter := progress.New("replay "+path, opts.Size, log)
	pub := bus.NewPublisher(*inflight)
	st, err := archive.Replay(ctx, f, opts, bus.Prefix(), bus.BlobBucket(), pub, func(n int, off int64) { meter.Update(int64(n), off) })
	if err == nil {
		err = pub.Flush(ctx)
	}
	meter.Update(int64(st.Frames), st.Bytes)
	meter.Stop(err)
	if err != nil {
		return replayCmd.Fail(stderr, cli.InputCode(err), path, err)
	}
	el := time.Since(start)
	if *asJSON {
		res := replayResult{Archive: path, Stream: bus.Config().Stream, Seconds: el.Seconds(), Frames: st.Frames, Bytes: st.Bytes,
			Metas: st.Metas, Revisions: st.Revisions, Blobs: st.Blobs, LargeBlobs: st.LargeBlobs, Unknown: st.Unknown,
			Stored: int64(pub.Stats.Published - pub.Stats.Duplicates), Duplicates: int64(pub.Stats.Duplicates), Warnings: []string{}}
		for _, w := range st.Warnings {
			res.Warnings = append(res.Warnings, w.Error())
		}
		cli.JSON(stdout, res)
		return exitOK
	}
	for _, w := range st.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w.Error())
	}
	fmt.Fprintf(stdout, "replayed %s to stream %s in %s: %d frames (%s), %d metas, %d revisions, %d blobs (%d via object store), %d unknown; %d events stored, %d already there (duplicates)\n",
		path, bus.Config().Stream, el.Round(time.Millisecond), st.Frames, progress.Bytes(st.Bytes), st.Metas, st.Revisions, st.Blobs, st.LargeBlobs, st.Unknown,
		pub.Stats.Published-pub.Stats.Duplicates, pub.Stats.Duplicates)
	return exitOK
}

// givenIn marks the stream settings set on fs's command line as given,
// so an existing stream is checked against them and never reset to this
// command's defaults (stream.Config.Given).
func givenIn(fs *flag.FlagSet, cfg stream.Config) stream.Config {
	cfg.Given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(stream.Settings, f.Name) {
			cfg.Given[f.Name] = true
		}
	})
	return cfg
}

// precheck runs `writer verify`'s checks over the whole archive and
// rewinds it: an archive with errors is refused before anything is
// published, naming the first problem.
func precheck(ctx context.Context, f *os.File, path string, opts acbak.Options, stderr io.Writer, log *slog.Logger) int {
	meter := progress.New("check "+path, opts.Size, log)
	var first *acbak.Problem
	res, err := acbak.Verify(ctx, f, opts, func(p acbak.Problem) {
		if !p.Warning && first == nil {
			first = &p
		}
	}, func(frames int, off int64) { meter.Update(int64(frames), off) })
	meter.Stop(err)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "writer replay: %s: %v; nothing was published\n", path, err)
		return exitInvalid
	case !res.Valid() && first == nil:
		fmt.Fprintf(stderr, "writer replay: %s: %d errors; nothing was published (writer verify lists them)\n", path, res.Errors)
		return exitInvalid
	case !res.Valid():
		fmt.Fprintf(stderr, "writer replay: %s: %d errors (first at frame %d, offset %d: %s); nothing was published (writer verify lists them)\n",
			path, res.Errors, first.Frame, first.Offset, first.Msg)
		return exitInvalid
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		fmt.Fprintf(stderr, "writer replay: %s: %v\n", path, err)
		return exitInvalid
	}
	return exitOK
}
