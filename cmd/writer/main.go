// Command writer publishes SpecStar records and works with .acbak archives.
//
//	writer inspect ARCHIVE [--json] [--lenient]   summarize an archive
//	writer verify ARCHIVE [--lenient]             check an archive completely
//	writer replay ARCHIVE [--nats URL]            publish an archive as events
//	writer snapshot --from postgres://...|NAME [--resources s3://... --blobs s3://...]  publish a deployment's state
//	writer snapshot --resources s3://...          publish an S3 resource store alone
//	writer tail --from postgres://...|NAME        and then its changes
//	writer export --from postgres://...|NAME ARCHIVE   write a deployment as an archive
//
// Exit status: 0 success (verify: the archive is valid), 1 the archive is
// not valid or could not be read, 2 usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/specstar/replicator/acbak"
)

const (
	exitOK      = 0
	exitInvalid = 1
	exitUsage   = 2
)

const usage = `usage: writer <command> [arguments]

commands:
  inspect ARCHIVE [--json] [--lenient] [--max-frame BYTES]
      Summarize an archive: models with their metas, revisions, blobs and
      blob bytes; records per tag (unknown tags included); schema versions
      and payload encodings; frames and bytes.
  verify ARCHIVE [--lenient] [--require-current] [--max-frame BYTES]
      Check everything the reader enforces plus exact re-encoding, blob
      file_ids and sizes, revision data_hashes and each meta's current
      revision. Exit 0 if valid, 1 if not (one line per problem).
  replay ARCHIVE [--nats URL] [--stream NAME] [--data-dir DIR] [--max-inflight N]
      Publish every record of the archive, in order, as events on the
      JetStream stream (an embedded server when no URL is given).
      Re-publishing stores nothing new: events carry deterministic ids.
  snapshot --from postgres://... [--resources s3://...] [--blobs s3://...|DIR] [--restart] [--nats URL]
      Publish the current state of a SpecStar deployment (metas, and
      revisions from its resource tables or its S3 resource store, and
      the blobs their payloads reference) from one consistent snapshot of
      its meta store; an interrupted snapshot resumes where it stopped.
      With --resources s3://... and no --from: every revision and blob of
      that S3 store (one listing, concurrent fetches).
  tail --from postgres://... [--resources ...] [--blobs ...] [--mode auto|logical|poll] [--nats URL]
      Publish a snapshot if none was completed, then every change as it
      happens until interrupted: by logical replication (a slot and a
      publication, created if missing) where wal_level=logical and the
      user may replicate, else by keyset polling. Positions are stored in
      the stream's positions bucket. --drop-slot removes the slot and
      the publication.
  export --from postgres://... [--resources ...] [--blobs ...] ARCHIVE
      Write one consistent snapshot of a SpecStar deployment as an .acbak
      archive (with the blobs its payloads reference).
  --config FILE (default $SPECSTAR_CONFIG) with snapshot, tail and export:
      --from may name a deployment of the file, whose nats settings apply.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command, with its streams passed in so tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	switch args[0] {
	case "inspect":
		return cmdInspect(ctx, args[1:], stdout, stderr, log)
	case "verify":
		return cmdVerify(ctx, args[1:], stdout, stderr, log)
	case "replay":
		return cmdReplay(ctx, args[1:], stdout, stderr, log)
	case "snapshot":
		return cmdSnapshot(ctx, args[1:], stdout, stderr, log)
	case "tail":
		return cmdTail(ctx, args[1:], stdout, stderr, log)
	case "export":
		return cmdExport(ctx, args[1:], stdout, stderr, log)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "writer: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// archiveFlags are the options every archive command takes.
type archiveFlags struct {
	lenient        bool
	maxFrame       int64
	requireCurrent bool
}

func (a *archiveFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&a.lenient, "lenient", false, "accept, with a warning, what SpecStar's loader accepts (missing Eof, bytes after it, mismatched ModelEnd)")
	fs.Int64Var(&a.maxFrame, "max-frame", acbak.DefaultMaxFrame, "largest frame to accept, in bytes")
	if fs.Name() == "verify" {
		fs.BoolVar(&a.requireCurrent, "require-current", false, "make a meta whose current revision is missing from the archive an error, not a warning")
	}
}

// parseArgs parses flags placed before or after the one positional
// argument, as in "writer inspect ARCHIVE --json".
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (string, bool) {
	fs.SetOutput(stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", false
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "writer %s: want exactly one ARCHIVE, got %d arguments\n", fs.Name(), len(pos))
		return "", false
	}
	return pos[0], true
}

// openArchive opens path and returns reader options carrying its size.
func openArchive(path string, a archiveFlags) (*os.File, acbak.Options, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, acbak.Options{}, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, acbak.Options{}, fmt.Errorf("stat %s: %w", path, err)
	}
	opts := acbak.Options{Lenient: a.lenient, MaxFrame: a.maxFrame, RequireCurrent: a.requireCurrent}
	if st.Mode().IsRegular() {
		opts.Size = st.Size()
	}
	return f, opts, nil
}
