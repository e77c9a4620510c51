// Command replicator materializes SpecStar events from JetStream into
// sinks, and checks sinks against their source. What is read is --from,
// what is written is --to; see the README's command-line vocabulary.
//
//	replicator run --to URL|NAME [--to ...] [--meta URL --resources URL --blobs URL] [--until-drained]
//	replicator restore --at TIME|--at-seq N --to URL|NAME [--force] [--accept-gap]
//	replicator mirror --from ARCHIVE --to DIR|URL|NAME
//	replicator verify --from ARCHIVE|DIR|URL|NAME --to URL|NAME
//	replicator reconcile --from ARCHIVE|DIR|URL|NAME --to URL|NAME [--dry-run] [--prune]
//	replicator doctor [--to SINK ...] [--from POSTGRES] [--monitor URL ...]
//	replicator status | dlq list | dlq replay | stream info | stream apply
//
// Exit status: 0 done or equal, 1 differences or invalid input, 2 usage
// or operational error.
package main

//go:generate go test -run TestCLIReference -update-reference .

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/specstar/replicator/internal/cli"
	redissink "github.com/specstar/replicator/sink/redis"
)

const (
	exitOK     = cli.ExitOK
	exitDiffer = cli.ExitDiffer
	exitError  = cli.ExitError
)

const usage = `usage: replicator <command> [flags]

commands:
  run        materialize the event stream into sinks (--to), as a service or --until-drained
  restore    apply the stream up to a time (--at) or sequence (--at-seq) to an empty sink (--to): point-in-time restore
  mirror     replay an archive (--from) into a sink (--to) on an embedded server, in one command
  verify     compare a sink (--to) with its source (--from); exit 1 if they differ
  reconcile  publish what a sink (--to) lacks from its source (--from); --dry-run exits 1 on differences
  doctor     check a deployment end to end: each check passes, warns or fails with its fix
  status     per sink consumer: pending events, ack floor, dead letters
  dlq        list or replay dead-lettered events (dlq list, dlq replay)
  stream     show (stream info) or change (stream apply) the event stream's settings
  help CMD   the help of a command (as CMD --help)

What is read is --from (an archive, a directory, a URL or a deployment
name of --config), what is written is --to (a URL or a deployment name);
see each command's --help. Exit status: 0 done or equal, 1 differences or
invalid input, 2 usage or operational error.
`

func main() {
	stopProfile, err := cli.StartCPUProfile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "replicator: %v\n", err)
		os.Exit(exitError)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err := stopProfile(); err != nil {
		fmt.Fprintf(os.Stderr, "replicator: %v\n", err)
	}
	os.Exit(code)
}

// groups are the commands that only group others, with their
// subcommands; groupHelp prints their help.
var groups = map[string]string{"dlq": "list, replay", "stream": "info, apply"}

// groupHelp is the help of a group: its usage and its subcommands' first
// examples.
func groupHelp(group string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: replicator %s <%s> [flags]\n(replicator %s <sub> --help shows its flags)\n\nexamples:\n",
		group, strings.ReplaceAll(groups[group], ", ", "|"), group)
	for _, c := range []*cli.Command{dlqListCmd, dlqReplayCmd, streamInfoCmd, streamApplyCmd} {
		if strings.HasPrefix(c.Name, "replicator "+group+" ") {
			fmt.Fprintf(&b, "  %s\n", c.Examples[len(c.Examples)-1])
		}
	}
	return b.String()
}

// commands are the replicator's commands by name ("dlq list" included).
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int{
	"run": cmdRun, "restore": cmdRestore, "mirror": cmdMirror, "verify": cmdVerify, "reconcile": cmdReconcile, "status": cmdStatus, "doctor": cmdDoctor,
	"dlq list": cmdDLQList, "dlq replay": cmdDLQReplay, "stream info": cmdStreamInfo, "stream apply": cmdStreamApply,
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	stderr, done := cli.StderrFor(stderr, args) // usage lines too, with --log-format json
	defer done()
	args = cli.CommandFirst(args)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	if args[0] == "help" && len(args) > 1 {
		if commands[args[1]] == nil && groups[args[1]] == "" {
			fmt.Fprintf(stderr, "replicator: unknown command %q\n\n%s", args[1], usage)
			return exitError
		}
		return run(ctx, append(append([]string{}, args[1:]...), "--help"), stdout, stderr)
	}
	log := cli.LoggerFor(stderr, args, cli.Service(args, []string{"run"}, []string{"until-drained"}))
	redissink.RouteLogs(log)
	slog.SetDefault(log) // for libraries that log on their own (the AWS SDK: sink/s3)
	switch cmd := args[0]; cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "dlq", "stream":
		if len(args) > 1 && commands[cmd+" "+args[1]] != nil {
			return commands[cmd+" "+args[1]](ctx, args[2:], stdout, stderr, log)
		}
		msg := groupHelp(cmd)
		if len(args) > 1 && (args[1] == "--help" || args[1] == "-h" || args[1] == "help") {
			fmt.Fprint(stdout, msg)
			return exitOK
		}
		fmt.Fprint(stderr, msg)
		return exitError
	default:
		if f := commands[cmd]; f != nil {
			return f(ctx, args[1:], stdout, stderr, log)
		}
	}
	fmt.Fprintf(stderr, "replicator: unknown command %q\n\n%s", strings.Join(args[:min(len(args), 2)], " "), usage)
	return exitError
}
