package main

// writer inspect and writer verify: an archive summarized or checked.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/progress"
)

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	var a archiveFlags
	a.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	path, ok := parseArgs(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	f, opts, err := openArchive(path, a)
	if err != nil {
		fmt.Fprintf(stderr, "writer inspect: %v\n", err)
		return exitInvalid
	}
	defer f.Close()
	meter := progress.New("inspect "+path, opts.Size, log)
	sum, err := acbak.Inspect(ctx, f, opts, func(n int, off int64) { meter.Update(int64(n), off) })
	meter.Update(int64(sum.Frames), sum.Bytes)
	meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "writer inspect: %s: %v\n", path, err)
		return exitInvalid
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			fmt.Fprintf(stderr, "writer inspect: %v\n", err)
			return exitInvalid
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

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var a archiveFlags
	a.register(fs)
	path, ok := parseArgs(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	f, opts, err := openArchive(path, a)
	if err != nil {
		fmt.Fprintf(stderr, "writer verify: %v\n", err)
		return exitInvalid
	}
	defer f.Close()
	meter := progress.New("verify "+path, opts.Size, log)
	report := func(p acbak.Problem) { fmt.Fprintln(stdout, p.String()) }
	res, err := acbak.Verify(ctx, f, opts, report, func(n int, off int64) { meter.Update(int64(n), off) })
	if res != nil {
		meter.Update(int64(res.Frames), res.Bytes)
	}
	meter.Done()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "writer verify: interrupted")
		} else {
			fmt.Fprintf(stderr, "writer verify: %s: %v\n", path, err)
		}
		return exitInvalid
	}
	verdict := "valid"
	if !res.Valid() {
		verdict = "NOT valid"
	}
	fmt.Fprintf(stdout, "%s: %s: %d frames, %d bytes, %d errors, %d warnings\n", path, verdict, res.Frames, res.Bytes, res.Errors, res.Warnings)
	if !res.Valid() {
		return exitInvalid
	}
	return exitOK
}
