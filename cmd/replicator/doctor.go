package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/specstar/replicator/doctor"
	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/deployment"
	pgsource "github.com/specstar/replicator/source/postgres"
)

var doctorCmd = &cli.Command{
	Name:  "replicator doctor",
	Usage: "replicator doctor [--to SINK ...] [--from POSTGRES] [--monitor URL ...] [--json] [flags]",
	Summary: "Check a deployment end to end: NATS, JetStream, the stream's replicas, duplicate window and fsync policy, every sink consumer's lag " +
		"against retention, a Postgres source's wal_level, role and slot, each sink's access and room, and clock skew; " +
		"each check passes, warns or fails with its fix. Exit 1 if any fails.",
	Examples: []string{
		"replicator doctor --to /var/lib/specstar-mirror",
		"replicator doctor --config prod.yaml --from prod --to mirror --monitor http://nats-0:8222 --json",
	},
}

// cmdDoctor prints doctor.Check's report.
func cmdDoctor(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	var verbose bool
	fs := doctorCmd.FlagSet(&verbose)
	var bf busFlags
	bf.registerConn(fs)
	var sa sinkArgs
	sa.register(fs, "a sink to check: URL or deployment name of --config (repeatable)")
	from := fs.String("from", "", "a Postgres source to check: postgres://... or a deployment of --config whose meta store is one")
	slot := fs.String("slot", "", "the source's replication slot (default: the one writer tail picks in that database)")
	var monitor cli.Multi
	fs.Var(&monitor, "monitor", "a NATS server's monitoring endpoint, http://HOST:8222, where its fsync policy is read (repeatable: one per server)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, code, ok := doctorCmd.Parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return doctorCmd.Usagef(stderr, "unexpected arguments %q", pos)
	}
	cfg, specs, err := sa.resolve(fs)
	if err != nil {
		return doctorCmd.Usagef(stderr, "%v", err)
	}
	source, err := postgresSource(cfg, *from)
	if err != nil {
		return doctorCmd.Usagef(stderr, "%v", err)
	}
	opts := doctor.Options{Monitor: monitor, Source: source, Slot: *slot}
	opts.Bus, opts.BusErr = bf.open(ctx, fs, log, true)
	if opts.Bus != nil {
		defer opts.Bus.Close()
	}
	for _, s := range specs {
		opts.Sinks = append(opts.Sinks, doctor.Sink{Name: s.Raw, Consumer: s.Name, DiskRoot: s.DiskRoot(), Open: s.OpenReader})
	}
	report := doctor.Check(ctx, opts)
	if *asJSON {
		p, w, f := report.Counts()
		cli.JSON(stdout, map[string]any{"checks": report.Results, "passed": p, "warned": w, "failed": f})
	} else {
		printReport(stdout, report)
	}
	if report.Failed() {
		return exitDiffer
	}
	return exitOK
}

// printReport prints one line per check, its fix indented below.
func printReport(w io.Writer, r *doctor.Report) {
	width := 0
	for _, res := range r.Results {
		width = max(width, len(res.Check))
	}
	for _, res := range r.Results {
		fmt.Fprintf(w, "%-4s  %-*s  %s\n", res.Status, width, res.Check, res.Detail)
		if res.Fix != "" {
			fmt.Fprintf(w, "      %*s  fix: %s\n", width, "", res.Fix)
		}
	}
	p, wa, f := r.Counts()
	fmt.Fprintf(w, "%d passed, %d warned, %d failed\n", p, wa, f)
}

// postgresSource is the DSN --from names: a postgres:// URL, or the meta
// store of a deployment of cfg; "" when --from is not given.
func postgresSource(cfg *deployment.Config, from string) (string, error) {
	if from == "" {
		return "", nil
	}
	raw := from
	if d, ok, err := cfg.Lookup(from); err != nil {
		return "", err
	} else if ok {
		if d, err = d.Resolved(); err != nil {
			return "", err
		}
		raw = d.Layer(deployment.MetaLayer)
	}
	if s := deployment.Scheme(raw); s != "postgres" {
		return "", fmt.Errorf("--from %s: doctor checks a Postgres source (postgres://...), not %s", strings.SplitN(from, "?", 2)[0], s)
	}
	dsn, _, err := pgsource.ParseURL(raw) // the driver's part of it
	return dsn, err
}
