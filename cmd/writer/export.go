package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/export"
	s3src "github.com/specstar/replicator/source/s3"
	"github.com/specstar/replicator/stream"
)

var exportCmd = &cli.Command{
	Name:  "writer export",
	Usage: "writer export --from ARCHIVE|DIR|URL|NAME|stream: --to OUT.acbak [--at TIME|--at-seq N] [--force] [--allow-missing-blobs] [flags]",
	Summary: `Write what a source holds as an .acbak archive, as SpecStar's dump
does: an archive, a disk deployment (files or SQLite metas), a Postgres,
Postgres+S3 or Postgres+disk deployment (one consistent snapshot of its
meta store), an S3 store, or a deployment of --config; with the blobs its
payloads reference. A referenced blob that cannot be found is an error
unless --allow-missing-blobs; an existing OUT is kept unless --force. The
archive (mode 0644) is written to a temporary file and renamed. With --at
(or --at-seq) the source is the event stream (--from stream:, or no
--from): the deployment as of that time, restored from the stream as
replicator restore does into a temporary disk tree beside OUT, then
exported.`,
	Examples: []string{
		"writer export --from /srv/specstar --to backup.acbak",
		"writer export --from postgres://db/app --from-resources s3://bkt/{model}/data/ --from-blobs s3://bkt/blobs/ --to backup.acbak",
		"writer export --config deploy.yaml --from primary --to backup.acbak --force --json",
		"writer export --at 2026-12-02T15:04:05Z --to as-of-15h04.acbak",
	},
}

// exportResult is what export prints with --json.
type exportResult struct {
	From    string  `json:"from"`
	To      string  `json:"to"`
	Seconds float64 `json:"seconds"`
	// From the stream: the last sequence restored and when it was stored.
	Sequence uint64    `json:"sequence,omitempty"`
	Time     time.Time `json:"time,omitzero"`
	export.Stats
}

// cmdExport is `writer export`: a source written as an archive
// (export.Write).
func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := exportCmd.FlagSet(&verbose)
	var src sourceFlags
	src.register(fs, stderr)
	to := fs.String("to", "", "the archive to write")
	force := fs.Bool("force", false, "overwrite an existing archive")
	allowMissing := fs.Bool("allow-missing-blobs", false, "leave out, with a warning, referenced blobs the blob store does not hold")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	var pit pointInTime
	pit.register(fs)
	pos, code, ok := exportCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) == 1 && *to == "" {
		cli.Deprecated(stderr, exportCmd.Name, "the positional ARCHIVE", "--to ARCHIVE")
		*to, pos = pos[0], nil
	}
	if len(pos) != 0 || *to == "" {
		return exportCmd.Usagef(stderr, "want --from SOURCE and --to OUT.acbak")
	}
	cfg, err := src.config(fs)
	if err != nil {
		return exportCmd.Usagef(stderr, "%v", err)
	}
	var asOf *replicate.RestoreResult
	display := ""
	switch fromStream := src.from == "stream:" || (src.from == "" && src.layers.Meta == "" && pit.given()); {
	case fromStream && !pit.given():
		return exportCmd.Usagef(stderr, "--from stream: exports the deployment as of a time: give --at TIME or --at-seq N")
	case fromStream:
		if !*force {
			if _, err := os.Stat(*to); err == nil {
				return exportCmd.Errorf(stderr, exitError, "export to %s: %v", *to, export.ErrExists)
			}
		}
		tree, res, code, err := pit.restore(ctx, fs, *to, log)
		if tree != nil {
			defer tree.Remove()
		}
		if err != nil {
			return exportCmd.Fail(stderr, code, "", err)
		}
		asOf, src.from = res, "disk:"+tree.Dir
		display = fmt.Sprintf("stream %s as of sequence %d (stored %s)", pit.bus.Stream, res.Point.Seq, res.Point.Time.UTC().Format(time.RFC3339Nano))
	case pit.given():
		return exportCmd.Usagef(stderr, "--at and --at-seq export the event stream: give --from stream: or no --from")
	}
	spec, err := deployment.SourceSpec(cfg, src.from, src.layers, source.Spec{})
	if err != nil {
		return exportCmd.Usagef(stderr, "%v", err)
	}
	if source.Scheme(spec.From) == "postgres" {
		spec.Blobs = firstOf(spec.Blobs, "refs") // the payloads' blob references are read
	}
	s, err := source.Open(spec)
	if err != nil {
		return exportCmd.Usagef(stderr, "%v", err)
	}
	if source.Scheme(spec.From) == "file" {
		// A missing archive is the input missing (exit 1), as everywhere.
		if _, err := os.Stat(strings.TrimPrefix(spec.From, "file://")); err != nil {
			return exportCmd.Fail(stderr, cli.InputCode(err), "", err)
		}
	}
	if ss, ok := s.(*s3src.Source); ok {
		// Each model's referenced blobs in its own section, as SpecStar's
		// dump writes them, read from the blob store below.
		ss.PerModelRefs = true
	}
	if spec.Blobs == "refs" {
		spec.Blobs = ""
	}
	blobs, closeBlobs, err := export.OpenBlobs(ctx, spec)
	if err != nil {
		return exportCmd.Errorf(stderr, exitError, "%v", err)
	}
	defer closeBlobs()
	start := time.Now()
	meter := progress.New("export "+firstOf(display, spec.Name), 0, log)
	st, err := export.Write(ctx, s, *to, export.Options{Blobs: blobs, AllowMissingBlobs: *allowMissing, Force: *force, Progress: meter.Update, Log: log})
	meter.Stop(err)
	switch {
	case errors.Is(err, export.ErrNoModels):
		return exportCmd.Errorf(stderr, exitDiffer, "%s: no models found (looked for %s); nothing was written", spec.Name, lookedFor(spec.From))
	case errors.Is(err, export.ErrExists):
		return exportCmd.Errorf(stderr, exitError, "%v", err)
	case err != nil && cli.InvalidArchive(err):
		return exportCmd.Fail(stderr, exitInvalid, spec.Name, err)
	case err != nil:
		return exportCmd.Fail(stderr, exitError, spec.Name, err)
	}
	res := exportResult{From: firstOf(display, spec.Name), To: *to, Seconds: time.Since(start).Seconds(), Stats: st}
	if asOf != nil {
		res.Sequence, res.Time = asOf.Point.Seq, asOf.Point.Time
	}
	if *asJSON {
		cli.JSON(stdout, res)
		return exitOK
	}
	cli.Printf(stdout, "exported %s to %s in %s: %d models, %d metas, %d revisions, %d blobs (%d referenced but missing), %d bytes\n",
		res.From, res.To, time.Since(start).Round(time.Millisecond), st.Models, st.Metas, st.Revisions, st.Blobs, st.Missing, st.Bytes)
	return exitOK
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// lookedFor says where a source's models are looked for, for the error
// of an export that found none.
func lookedFor(from string) string {
	switch source.Scheme(from) {
	case "postgres", "postgresql":
		return "meta tables named by meta_table= (default {model}_meta, after table_prefix=) in " + source.Redact(from)
	case "s3":
		if source.S3Factory(from) {
			return "{model}/meta.db below the factory's prefix " + source.Redact(from)
		}
		return "revisions under the resource store's prefix " + source.Redact(from)
	case "redis", "rediss":
		return "keys {prefix}resource_meta:* (and the slow= store's metas) in " + source.Redact(from)
	case "file":
		return "ModelStart frames in the archive, or {model}/meta and {model}/meta.db in the directory " + from
	}
	return "{model}/meta and {model}/meta.db below " + from
}

// pointInTime is what export reads from the stream as of a time: --at or
// --at-seq, --accept-gap and where the stream is.
type pointInTime struct {
	at        string
	atSeq     uint64
	acceptGap bool
	bus       stream.Config
}

func (p *pointInTime) register(fs *flag.FlagSet) {
	fs.StringVar(&p.at, "at", "", "export the deployment as of this time, from the event stream: RFC 3339 (2026-12-02T15:04:05Z) or a duration ago (2h)")
	fs.Uint64Var(&p.atSeq, "at-seq", 0, "export the deployment as of this stream sequence instead")
	fs.BoolVar(&p.acceptGap, "accept-gap", false, "with --at: export even though retention removed the stream's first events (the archive lacks what only they held)")
	fs.StringVar(&p.bus.URL, "nats", os.Getenv("NATS_URL"), "with --at: NATS server URL (default $NATS_URL; empty runs an embedded JetStream server)")
	fs.StringVar(&p.bus.Stream, "stream", "SPECSTAR", "with --at: JetStream stream name")
	fs.StringVar(&p.bus.SubjectPrefix, "subject-prefix", "specstar", "with --at: subject prefix of events")
	fs.StringVar(&p.bus.DataDir, "data-dir", stream.DefaultDataDir(), "with --at: embedded server's data directory")
	p.bus.RegisterMirror(fs)
	p.bus.RegisterSyncInterval(fs)
	p.bus.Auth.Register(fs)
}

// given reports whether a point in time was asked for.
func (p *pointInTime) given() bool { return p.at != "" || p.atSeq != 0 }

// restore restores the stream as of the point into a new temporary disk
// tree beside out (the archive's size fits there) and returns the tree,
// which the caller removes, with where the restore stopped; on an error,
// the exit code too.
func (p *pointInTime) restore(ctx context.Context, fs *flag.FlagSet, out string, log *slog.Logger) (*replicate.Tree, *replicate.RestoreResult, int, error) {
	var at time.Time
	if p.atSeq == 0 {
		var err error
		if at, err = replicate.ParseTime(p.at, time.Now()); err != nil {
			return nil, nil, exitError, err
		}
	}
	cfg := givenIn(fs, p.bus)
	cfg.ReadOnly = true // an export creates no stream
	bus, err := stream.Open(ctx, cfg, log)
	if err != nil {
		return nil, nil, exitError, err
	}
	defer bus.Close()
	tree, res, err := replicate.RestoreTree(ctx, bus, out, replicate.RestoreOptions{
		Config: replicate.DefaultConfig(), At: at, AtSeq: p.atSeq, AcceptGap: p.acceptGap,
		Name: "export", Display: "stream " + cfg.Stream, Logger: log,
	})
	var dead *replicate.DeadLetteredError
	var treeErr *replicate.TreeError
	switch {
	case errors.As(err, &treeErr):
		return tree, nil, exitError, err
	case errors.As(err, &dead):
		return tree, nil, exitDiffer, err
	case err != nil && res == nil:
		return tree, nil, cli.InputCode(err), err
	case err != nil:
		return tree, nil, exitError, err
	}
	return tree, res, exitOK, nil
}
