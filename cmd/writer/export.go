package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/postgres"
)

// cmdExport is `writer export`: one consistent snapshot of a deployment
// written as an archive (see postgres.Export).
func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	from := fs.String("from", "", "the deployment's Postgres: postgres://...?table_prefix=&revisions=true&blobs=DIR (as for writer snapshot)")
	var stores storeFlags
	stores.register(fs)
	var config configFlag
	config.register(fs)
	path, ok := parseArgs(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if err := config.resolve(fs, from, &stores); err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitUsage
	}
	if *from == "" {
		fmt.Fprintln(stderr, "writer export: --from postgres://... is required")
		return exitUsage
	}
	if _, _, err := postgres.ParseURL(*from); err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitUsage
	}
	d, err := postgres.OpenDeployment(ctx, *from, postgres.Stores{Resources: stores.resources, Blobs: stores.blobs})
	if err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitInvalid
	}
	defer d.Close()
	start := time.Now()
	meter := progress.New("export "+source.Redact(*from), 0, log)
	st, err := postgres.Export(ctx, d, path, log, meter.Update)
	meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitInvalid
	}
	fmt.Fprintf(stdout, "exported %s to %s in %s: %d models, %d metas, %d revisions, %d blobs (%d referenced but missing), %d bytes\n",
		source.Redact(*from), path, time.Since(start).Round(time.Millisecond), st.Models, st.Metas, st.Revisions, st.Blobs, st.Missing, st.Bytes)
	return exitOK
}
