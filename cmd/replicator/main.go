// Command replicator materializes SpecStar events from JetStream into
// sinks, and checks sinks against their source.
//
//	replicator run --sink URL|NAME [--sink ...] [--meta URL --resources URL --blobs URL] [--config FILE] [--until-drained]
//	replicator mirror --from ARCHIVE --to DIR
//	replicator verify --archive ARCHIVE|--source DEPLOYMENT --sink URL|NAME
//	replicator reconcile --archive ARCHIVE|--source DEPLOYMENT --sink URL|NAME [--dry-run] [--prune]
//	replicator status | dlq list | dlq replay
//
// Exit status: 0 success, 1 failure (verify: the sink differs), 2 usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/stream"
)

const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	defaultNATS = "" // embedded
)

const usage = `usage: replicator <command> [arguments]

commands:
  run --sink URL|NAME [--sink ...] [--meta URL --resources URL --blobs URL] [--until-drained]
      Materialize the event stream into each sink through its own durable
      consumer. A sink is disk:/path (or a path), with options
      ?encoding=json|msgpack&meta=files|sqlite&index=uid|symlink
      &on_duplicate=newer|overwrite|skip|raise_error&sync=file|batch
      &name=N&models=a,b; postgres://... (SpecStar's tables); s3://bucket/prefix
      ?endpoint=&region=&path_style=true (SpecStar's S3 resource and blob
      stores); a deployment of the --config file by name; or one deployment
      given layer by layer with --meta, --resources and --blobs.
  mirror --from ARCHIVE --to DIR|URL|NAME (or --meta/--resources/--blobs)
      One command on an embedded JetStream server: replay the archive,
      materialize it into a sink, print a summary.
  verify --archive ARCHIVE --sink URL|NAME
  verify --source postgres://...|NAME [--source-resources s3://...] [--source-blobs s3://...] --sink URL|NAME
      Compare a sink with an archive or a live deployment (one snapshot of
      its meta store): metas, revisions (info and payload) and blobs.
      Exit 0 only if equal.
  reconcile --archive ARCHIVE|--source DEPLOYMENT --sink URL|NAME [--dry-run] [--prune]
      Report how a sink differs from its source and publish the missing or
      older records onto the stream for run to apply. --prune also purges
      resources only the sink holds: the purges go onto the shared stream,
      so every sink consuming it removes them too.
  status [--json]
      Per sink: pending events, ack floor, oldest unacked event's age,
      redeliveries and dead letters.
  dlq list [--sink NAME]
      Show dead-lettered events with their reasons.
  dlq replay [--sink NAME]
      Re-publish dead-lettered events to the stream and remove them.
  stream info [--json]
      The event stream's settings and state.
  stream apply [--max-age D] [--max-bytes N] [--duplicate-window D] [--retention R] [--replicas N]
      Change the settings given, and only those. No other command changes
      an existing stream: one given a stream flag that differs from the
      stream fails, naming the setting.

common flags: --nats URL (default $NATS_URL; neither: embedded server),
  --stream NAME, --data-dir DIR (embedded server storage), --subject-prefix P;
  in a second region: --mirror-of STREAM with --mirror-domain D (leaf node)
  or --mirror-api-prefix P, and --domain D for an embedded server;
  --config FILE (default $SPECSTAR_CONFIG): these settings in YAML, and the
  deployments run, mirror, verify and reconcile may name (see README)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, stdout, stderr, log)
	case "mirror":
		return cmdMirror(ctx, rest, stdout, stderr, log)
	case "verify":
		return cmdVerify(ctx, rest, stdout, stderr, log)
	case "reconcile":
		return cmdReconcile(ctx, rest, stdout, stderr, log)
	case "status":
		return cmdStatus(ctx, rest, stdout, stderr, log)
	case "stream":
		return cmdStream(ctx, rest, stdout, stderr, log)
	case "dlq":
		if len(rest) > 0 && rest[0] == "list" {
			return cmdDLQList(ctx, rest[1:], stdout, stderr, log)
		}
		if len(rest) > 0 && rest[0] == "replay" {
			return cmdDLQReplay(ctx, rest[1:], stdout, stderr, log)
		}
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "replicator: unknown command %q\n\n%s", strings.Join(args[:min(len(args), 2)], " "), usage)
	return exitUsage
}

// busFlags are the flags every command that talks to the stream takes.
type busFlags struct {
	cfg stream.Config
}

func (b *busFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.cfg.URL, "nats", os.Getenv("NATS_URL"), "NATS server URL (default $NATS_URL; empty runs an embedded JetStream server)")
	fs.StringVar(&b.cfg.Stream, "stream", "SPECSTAR", "JetStream stream name")
	fs.StringVar(&b.cfg.SubjectPrefix, "subject-prefix", "specstar", "subject prefix of events")
	fs.StringVar(&b.cfg.DataDir, "data-dir", stream.DefaultDataDir(), "embedded server's data directory")
	fs.IntVar(&b.cfg.Replicas, "replicas", 1, "stream replicas (clustered servers)")
	fs.DurationVar(&b.cfg.MaxAge, "max-age", 0, "stream retention by age (0: unlimited)")
	fs.Int64Var(&b.cfg.MaxBytes, "max-bytes", 0, "stream retention by size (0: unlimited)")
	fs.StringVar(&b.cfg.Retention, "retention", "limits", "stream retention policy: limits, interest or workqueue")
	fs.DurationVar(&b.cfg.DuplicateWindow, "duplicate-window", time.Hour, "how long JetStream drops re-published records by message id")
	fs.StringVar(&b.cfg.MirrorOf, "mirror-of", "", "make the stream a read-only mirror of this upstream stream (and its blob bucket), e.g. another region's SPECSTAR")
	fs.StringVar(&b.cfg.MirrorDomain, "mirror-domain", "", "JetStream domain of the --mirror-of stream (leaf-node regions): API prefix $JS.<domain>.API")
	fs.StringVar(&b.cfg.MirrorAPIPrefix, "mirror-api-prefix", "", "external JetStream API prefix of the --mirror-of stream (instead of --mirror-domain)")
	fs.StringVar(&b.cfg.Domain, "domain", "", "JetStream domain of the embedded server")
}

// open connects to the stream with the settings the command line (or
// --config) gave explicitly marked as given, so an existing stream is
// checked against them and never reset to this command's defaults.
// readOnly commands create nothing.
func (b *busFlags) open(ctx context.Context, fs *flag.FlagSet, log *slog.Logger, readOnly bool) (*stream.Bus, error) {
	cfg := b.cfg
	cfg.ReadOnly = readOnly
	cfg.Given = map[string]bool{}
	if fs != nil { // nil: no setting counts as given
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains(stream.Settings, f.Name) {
				cfg.Given[f.Name] = true
			}
		})
	}
	return stream.Open(ctx, cfg, log)
}

// configOnly is --config for the commands that name no deployment (status,
// dlq): the file's nats settings fill the bus flags the command line left
// unset, so a region's status is `replicator status --config b.yaml`.
type configOnly struct{ path string }

func (c *configOnly) register(fs *flag.FlagSet) {
	fs.StringVar(&c.path, "config", os.Getenv("SPECSTAR_CONFIG"), "YAML file whose nats settings apply (default $SPECSTAR_CONFIG)")
}

// apply reads the file, if any, into fs's unset flags.
func (c *configOnly) apply(fs *flag.FlagSet) error {
	if c.path == "" {
		return nil
	}
	cfg, err := deployment.Load(c.path)
	if err != nil {
		return err
	}
	return cfg.ApplyFlags(fs)
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// parse parses flags wherever they stand and returns the positionals.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, bool) {
	fs.SetOutput(stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, false
		}
		if fs.NArg() == 0 {
			return pos, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
