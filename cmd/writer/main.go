// Command writer publishes SpecStar records and works with .acbak
// archives. What is read is --from; see the README's command-line
// vocabulary.
//
//	writer inspect --from ARCHIVE [--json]        summarize an archive
//	writer verify --from ARCHIVE [--json]         check an archive completely
//	writer replay --from ARCHIVE [--nats URL]     publish an archive as events
//	writer snapshot --from postgres://...|NAME    publish a deployment's state
//	writer tail --from postgres://...|NAME        and then its changes
//	writer export --from SOURCE --to OUT.acbak    write any source as an archive
//	writer export --at TIME --to OUT.acbak        the deployment as of TIME, from the event stream
//
// Exit status: 0 done (verify: the archive is valid), 1 the input is not
// valid, 2 usage or operational error.
package main

//go:generate go test -run TestCLIReference -update-reference .

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/specstar/replicator/internal/cli"
	redissink "github.com/specstar/replicator/sink/redis"
)

const (
	exitOK     = cli.ExitOK
	exitDiffer = cli.ExitDiffer
	exitError  = cli.ExitError
	// exitInvalid is an archive that is not valid.
	exitInvalid = cli.ExitDiffer
	exitUsage   = cli.ExitError
)

const usage = `usage: writer <command> [flags]

commands:
  inspect   summarize an archive (--from ARCHIVE)
  verify    check an archive completely; exit 1 if it is not valid
  replay    publish an archive's records as events on the stream
  snapshot  publish the current state of a live deployment (--from postgres://...|NAME)
  tail      publish a snapshot, then every change as it happens
  export    write any source (archive, disk, Postgres, Postgres+S3, S3, NAME, or the stream as of --at) as an archive (--to)
  help CMD  the help of a command (as CMD --help)

What is read is --from (an archive, a directory, a URL or a deployment
name of --config). Exit status: 0 done, 1 the input is not valid, 2 usage
or operational error.
`

func main() {
	stopProfile, err := cli.StartCPUProfile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "writer: %v\n", err)
		os.Exit(exitError)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err := stopProfile(); err != nil {
		fmt.Fprintf(os.Stderr, "writer: %v\n", err)
	}
	os.Exit(code)
}

// commands are the writer's commands by name.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int{
	"inspect": cmdInspect, "verify": cmdVerify, "replay": cmdReplay, "snapshot": cmdSnapshot, "tail": cmdTail, "export": cmdExport,
}

// run is the whole command, with its streams passed in so tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	stderr, done := cli.StderrFor(stderr, args) // usage lines too, with --log-format json
	defer done()
	args = cli.CommandFirst(args)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	if args[0] == "help" && len(args) > 1 {
		return run(ctx, []string{args[1], "--help"}, stdout, stderr)
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if f := commands[args[0]]; f != nil {
		log := cli.LoggerFor(stderr, args, cli.Service(args, []string{"tail"}, []string{"drop-slot"}))
		redissink.RouteLogs(log)
		slog.SetDefault(log) // for libraries that log on their own (the AWS SDK: sink/s3)
		return f(ctx, args[1:], stdout, stderr, log)
	}
	fmt.Fprintf(stderr, "writer: unknown command %q\n\n%s", args[0], usage)
	return exitError
}
