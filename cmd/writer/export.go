package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/export"
	s3src "github.com/specstar/replicator/source/s3"
)

var exportCmd = &cli.Command{
	Name:  "writer export",
	Usage: "writer export --from ARCHIVE|DIR|URL|NAME --to OUT.acbak [--force] [--allow-missing-blobs] [flags]",
	Summary: `Write what a source holds as an .acbak archive, as SpecStar's dump
does: an archive, a disk deployment (files or SQLite metas), a Postgres,
Postgres+S3 or Postgres+disk deployment (one consistent snapshot of its
meta store), an S3 store, or a deployment of --config; with the blobs its
payloads reference. A referenced blob that cannot be found is an error
unless --allow-missing-blobs; an existing OUT is kept unless --force. The
archive (mode 0644) is written to a temporary file and renamed.`,
	Examples: []string{
		"writer export --from /srv/specstar --to backup.acbak",
		"writer export --from postgres://db/app --from-resources s3://bkt/{model}/data/ --from-blobs s3://bkt/blobs/ --to backup.acbak",
		"writer export --config deploy.yaml --from primary --to backup.acbak --force --json",
	},
}

// exportResult is what export prints with --json.
type exportResult struct {
	From    string  `json:"from"`
	To      string  `json:"to"`
	Seconds float64 `json:"seconds"`
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
	meter := progress.New("export "+spec.Name, 0, log)
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
	res := exportResult{From: spec.Name, To: *to, Seconds: time.Since(start).Seconds(), Stats: st}
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
