package main

// writer inspect and writer verify: an archive summarized or checked.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/progress"
)

var inspectCmd = &cli.Command{
	Name:  "writer inspect",
	Usage: "writer inspect --from ARCHIVE [--json] [--lenient] [--max-frame BYTES]",
	Summary: `Summarize an archive: models with their metas, revisions, blobs and
blob bytes; records per tag (unknown tags included); schema versions and
payload encodings; frames and bytes.`,
	Examples: []string{"writer inspect --from dump.acbak", "writer inspect --from dump.acbak --json"},
}

var verifyCmd = &cli.Command{
	Name:  "writer verify",
	Usage: "writer verify --from ARCHIVE [--json] [--lenient] [--require-current] [--max-frame BYTES]",
	Summary: `Check everything the reader enforces plus exact re-encoding, blob
file_ids and sizes, revision data_hashes and each meta's current revision.
Exit 0 if valid, 1 if not (one line per problem).`,
	Examples: []string{"writer verify --from dump.acbak", "writer verify --from dump.acbak --require-current --json"},
}

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := inspectCmd.FlagSet(&verbose)
	var a archiveFlags
	a.register(fs, false)
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, code, ok := inspectCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	path, code, ok := a.path(inspectCmd, pos, stderr)
	if !ok {
		return code
	}
	f, opts, err := openArchive(path, a)
	if err != nil {
		return inspectCmd.Fail(stderr, exitInvalid, "", err)
	}
	defer f.Close()
	meter := progress.New("inspect "+path, opts.Size, log)
	sum, err := acbak.Inspect(ctx, f, opts, func(n int, off int64) { meter.Update(int64(n), off) })
	meter.Update(int64(sum.Frames), sum.Bytes)
	meter.Stop(err)
	if err != nil {
		return inspectCmd.Fail(stderr, exitInvalid, path, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return inspectCmd.Fail(stderr, exitError, "", err)
		}
		return exitOK
	}
	printSummary(stdout, path, sum)
	return exitOK
}

func printSummary(w io.Writer, path string, s *acbak.Summary) {
	fmt.Fprintf(w, "archive %s: format version %d, %d frames, %s (%d bytes)\n", path, s.Version, s.Frames, progress.Bytes(s.Bytes), s.Bytes)
	tags := make([]string, 0, len(s.Records))
	for t := range s.Records {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	fmt.Fprintln(w, "records:")
	for _, t := range tags {
		fmt.Fprintf(w, "  %-18s %d\n", t, s.Records[t])
	}
	fmt.Fprintln(w, "models:")
	for _, m := range s.Models {
		fmt.Fprintf(w, "  %s: %d metas, %d revisions, %d blobs (%s); schema versions [%s]; payload encodings [%s]\n",
			m.Name, m.Metas, m.Revisions, m.Blobs, progress.Bytes(m.BlobBytes),
			strings.Join(m.SchemaVersions, ", "), strings.Join(m.Encodings, ", "))
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

// verifyResult is what verify prints with --json.
type verifyResult struct {
	Archive  string   `json:"archive"`
	Valid    bool     `json:"valid"`
	Frames   int      `json:"frames"`
	Bytes    int64    `json:"bytes"`
	Errors   int      `json:"errors"`
	Warnings int      `json:"warnings"`
	Problems []string `json:"problems"`
}

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := verifyCmd.FlagSet(&verbose)
	var a archiveFlags
	a.register(fs, true)
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, code, ok := verifyCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	path, code, ok := a.path(verifyCmd, pos, stderr)
	if !ok {
		return code
	}
	f, opts, err := openArchive(path, a)
	if err != nil {
		return verifyCmd.Fail(stderr, exitInvalid, "", err)
	}
	defer f.Close()
	meter := progress.New("verify "+path, opts.Size, log)
	problems := []string{}
	report := func(p acbak.Problem) {
		if *asJSON {
			problems = append(problems, p.String())
			return
		}
		fmt.Fprintln(stdout, p.String())
	}
	res, err := acbak.Verify(ctx, f, opts, report, func(n int, off int64) { meter.Update(int64(n), off) })
	if res != nil {
		meter.Update(int64(res.Frames), res.Bytes)
	}
	meter.Stop(err)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "writer verify: interrupted")
		} else {
			verifyCmd.Fail(stderr, exitInvalid, path, err)
		}
		return exitInvalid
	}
	if *asJSON {
		cli.JSON(stdout, verifyResult{Archive: path, Valid: res.Valid(), Frames: res.Frames, Bytes: res.Bytes,
			Errors: res.Errors, Warnings: res.Warnings, Problems: problems})
	} else {
		verdict := "valid"
		if !res.Valid() {
			verdict = "NOT valid"
		}
		fmt.Fprintf(stdout, "%s: %s: %d frames, %d bytes, %d errors, %d warnings\n", path, verdict, res.Frames, res.Bytes, res.Errors, res.Warnings)
	}
	if !res.Valid() {
		return exitInvalid
	}
	return exitOK
}
