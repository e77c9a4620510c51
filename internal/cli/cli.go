// Package cli is what the replicator's commands (cmd/replicator,
// cmd/writer) share about their command line: exit codes, one help
// format (usage line, what the command does, flags grouped by what they
// name, examples), deprecated flag spellings, --json and -v. It exists
// so that every command speaks the same vocabulary and cannot drift.
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/specstar/replicator/acbak"
)

// Exit codes, the same for every command.
const (
	// ExitOK: done, or equal.
	ExitOK = 0
	// ExitDiffer: differences found, or input that is missing or not
	// valid (an archive missing or not valid, dead-lettered records, a
	// deployment that cannot be followed): see InputCode.
	ExitDiffer = 1
	// ExitError: a usage error, or an operational error (a store or the
	// stream could not be reached, a write failed).
	ExitError = 2
)

// Group is what a flag names, for help and the README's vocabulary table.
type Group string

// The flag groups, in the order help prints them.
const (
	GroupSource  Group = "source"  // what is read
	GroupSink    Group = "sink"    // what is written
	GroupStream  Group = "stream"  // the JetStream stream and its server
	GroupOutput  Group = "output"  // what is printed, served or logged
	GroupOptions Group = "options" // everything else
)

var groupOrder = []Group{GroupSource, GroupSink, GroupStream, GroupOutput, GroupOptions}

// groups assigns flags to groups by name; flags not listed are options.
var groups = map[string]Group{
	"from": GroupSource, "from-meta": GroupSource, "from-resources": GroupSource, "from-blobs": GroupSource,
	"archive": GroupSource, "source": GroupSource, "source-resources": GroupSource, "source-blobs": GroupSource,
	"to": GroupSink, "sink": GroupSink, "meta": GroupSink, "resources": GroupSink, "blobs": GroupSink, "consumer": GroupSink,
	"nats": GroupStream, "stream": GroupStream, "subject-prefix": GroupStream, "data-dir": GroupStream, "sync-interval": GroupStream, "replicas": GroupStream,
	"max-age": GroupStream, "max-bytes": GroupStream, "retention": GroupStream, "duplicate-window": GroupStream,
	"mirror-of": GroupStream, "mirror-domain": GroupStream, "mirror-api-prefix": GroupStream, "domain": GroupStream,
	"config": GroupStream, "max-inflight": GroupStream, "nats-creds": GroupStream, "nats-nkey": GroupStream,
	"tls-ca": GroupStream, "tls-cert": GroupStream, "tls-key": GroupStream,
	"json": GroupOutput, "v": GroupOutput, "listen": GroupOutput, "log-format": GroupOutput,
}

// GroupOf is the group of a flag of the named command. The writer's
// snapshot and tail read --resources and --blobs (deprecated spellings of
// --from-resources and --from-blobs).
func GroupOf(command, name string) Group {
	if (name == "resources" || name == "blobs") && strings.HasPrefix(command, "writer ") {
		return GroupSource
	}
	if g, ok := groups[name]; ok {
		return g
	}
	return GroupOptions
}

// Command describes one command for its help.
type Command struct {
	Name     string   // "replicator verify"
	Usage    string   // the usage line, without "usage: "
	Summary  string   // what it does, one paragraph
	Examples []string // two or three command lines
}

// DeprecatedMark is what the help of a deprecated spelling contains.
const DeprecatedMark = "(deprecated: use "

// FlagSet returns an empty flag set for the command, with -v and
// --log-format (read before parsing, by Logger's caller: see LogFormat).
func (c *Command) FlagSet(verbose *bool) *flag.FlagSet {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.BoolVar(verbose, "v", false, "log INFO lines (progress, connections) on stderr (services log them unless -q)")
	fs.Bool("q", false, "log WARN and above only, also for a service (run without --until-drained, tail)")
	fs.Func("log-format", "how stderr's log lines are written: text (key=value, the default) or json (one JSON object per line, the same fields)", func(v string) error {
		_, err := parseLogFormat(v)
		return err
	})
	return fs
}

// The log formats of --log-format.
const (
	LogText = "text" // slog's key=value lines, the default
	LogJSON = "json" // one JSON object per line
)

func parseLogFormat(v string) (string, error) {
	switch v {
	case LogText, LogJSON:
		return v, nil
	}
	return "", fmt.Errorf("%q is no log format (want text or json; this error is text, since no format was understood)", v)
}

// LogFormat is the --log-format args give (the last one), so that the
// logger can be made before the command's flags are parsed: LogText
// unless json is asked for; a bad value is left for the parser to report.
func LogFormat(args []string) string {
	format := LogText
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "log-format" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			v = args[i]
		}
		if f, err := parseLogFormat(v); err == nil {
			format = f
		}
	}
	return format
}

// ParseHook, when not nil, is called with every flag set Parse is given
// before it parses; tests use it to collect each command's flags.
var ParseHook func(c *Command, fs *flag.FlagSet)

// ParseOnlyEnv names the environment variable that, set to 1, makes every
// command stop once its command line is parsed: it prints
// "<command>: command line accepted" and exits 0, or prints the usage
// error and exits 2, and opens nothing. It exists so that the
// Kubernetes manifests' tests (deploy/k8s) check each container's command
// line with the parser that will read it.
const ParseOnlyEnv = "SPECSTAR_PARSE_ONLY"

// Parse parses args (flags may follow positionals) and returns the
// positionals. On --help it prints the help on stdout and returns ExitOK
// with ok false; on a usage error it prints the error and a hint on
// stderr and returns ExitError with ok false. With ParseOnlyEnv set to 1,
// a command line that parses returns ExitOK with ok false.
func (c *Command) Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	if ParseHook != nil {
		ParseHook(c, fs)
	}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.PrintHelp(stdout, fs)
			return nil, ExitOK, false
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\nusage: %s\n(%s --help shows every flag)\n", c.Name, err, c.Usage, c.Name)
			return nil, ExitError, false
		}
		if fs.NArg() == 0 {
			if os.Getenv(ParseOnlyEnv) == "1" {
				if len(pos) > 0 {
					fmt.Fprintf(stdout, "%s: command line accepted, with positional arguments %q\n", c.Name, pos)
				} else {
					fmt.Fprintf(stdout, "%s: command line accepted\n", c.Name)
				}
				return pos, ExitOK, false
			}
			return pos, ExitOK, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// Usagef prints a usage error naming the command and returns ExitError.
func (c *Command) Usagef(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\nusage: %s\n", c.Name, OneLine(fmt.Sprintf(format, args...)), c.Usage)
	return ExitError
}

// Errorf prints an error naming the command, on one line, and returns code.
func (c *Command) Errorf(stderr io.Writer, code int, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", c.Name, OneLine(fmt.Sprintf(format, args...)))
	return code
}

// Fail prints err naming the command and what (the object it concerns,
// left out when err already names it), on one line, and returns code.
func (c *Command) Fail(stderr io.Writer, code int, what string, err error) int {
	if what == "" || strings.Contains(err.Error(), what) {
		return c.Errorf(stderr, code, "%v", err)
	}
	return c.Errorf(stderr, code, "%s: %v", what, err)
}

// OneLine joins a message's lines with "; ", each once: a driver's error
// that lists every address it tried (the same dial error for each) is
// printed as one line.
func OneLine(msg string) string {
	if !strings.Contains(msg, "\n") {
		return msg
	}
	var parts []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimRight(strings.TrimSpace(l), ":")
		if l != "" && !slices.Contains(parts, l) {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// InvalidArchive reports whether err is an archive that is not valid
// (an *acbak.Error: not an archive, truncated, out of order).
func InvalidArchive(err error) bool {
	var ae *acbak.Error
	return errors.As(err, &ae) || errors.Is(err, acbak.ErrNotArchive) || errors.Is(err, acbak.ErrEmpty)
}

// InputCode is the exit status of an error reading the input (--from):
// ExitDiffer when the input is missing or not valid, which no retry
// changes (a missing file, a file that is not a valid archive, a
// condition of the source an error with a Permanent method reports);
// ExitError for anything else (a store or the stream unreachable).
func InputCode(err error) int {
	var perm interface{ Permanent() bool }
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, fs.ErrNotExist), InvalidArchive(err):
		return ExitDiffer
	case errors.As(err, &perm) && perm.Permanent():
		return ExitDiffer
	}
	return ExitError
}

// PrintHelp writes the usage line, the summary, the flags by group and
// the examples.
func (c *Command) PrintHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", c.Usage, c.Summary)
	byGroup := map[Group][]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) { byGroup[GroupOf(c.Name, f.Name)] = append(byGroup[GroupOf(c.Name, f.Name)], f) })
	for _, g := range groupOrder {
		if len(byGroup[g]) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s flags:\n", g)
		for _, f := range byGroup[g] {
			name, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if name != "" {
				line += " " + name
			}
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "[]" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			}
			fmt.Fprintf(w, "%s\n      %s\n", line, usage)
		}
	}
	if len(c.Examples) > 0 {
		fmt.Fprintln(w, "\nexamples:")
		for _, e := range c.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// Alias registers old as a deprecated spelling of the flag to (already
// registered on fs): setting it sets to and warns once on warn.
func Alias(fs *flag.FlagSet, old, to string, warn io.Writer) {
	target := fs.Lookup(to)
	if target == nil {
		panic("cli: alias of unknown flag --" + to)
	}
	fs.Var(&alias{old: old, to: to, target: target.Value, warn: warn, cmd: fs.Name()}, old,
		fmt.Sprintf("%s--%s) %s", DeprecatedMark, to, firstSentence(target.Usage)))
}

type alias struct {
	old, to, cmd string
	target       flag.Value
	warn         io.Writer
	warned       bool
}

func (a *alias) String() string {
	if a == nil || a.target == nil {
		return ""
	}
	return a.target.String()
}

func (a *alias) Set(v string) error {
	if !a.warned {
		a.warned = true
		Deprecated(a.warn, a.cmd, "--"+a.old, "--"+a.to)
	}
	return a.target.Set(v)
}

// IsBoolFlag lets a deprecated spelling of a boolean flag stand alone.
func (a *alias) IsBoolFlag() bool {
	b, ok := a.target.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Deprecated prints the one-line warning for a deprecated spelling.
func Deprecated(w io.Writer, cmd, old, now string) {
	fmt.Fprintf(w, "%s: warning: %s is deprecated: use %s\n", cmd, old, now)
}

func firstSentence(s string) string {
	if i := strings.Index(s, ": "); i > 0 && i < 40 {
		return s[:i]
	}
	return s
}

// Logger is the commands' logger: text on stderr, WARN and above unless
// verbose.
func Logger(stderr io.Writer, verbose bool) *slog.Logger {
	return NewLogger(stderr, verbose, LogText)
}

// LoggerFor is the logger a command line asks for: -v, -q and
// --log-format. A service (a process that runs until stopped, such as
// `replicator run` or `writer tail`) logs its lifecycle at INFO unless -q,
// as nats-server, Litestream and Debezium do, so that `kubectl logs` says
// what it does; a one-shot command logs INFO only with -v.
func LoggerFor(stderr io.Writer, args []string, service bool) *slog.Logger {
	verbose := Verbose(args) || service && !hasBoolFlag(args, "q")
	return NewLogger(stderr, verbose, LogFormat(args))
}

// hasBoolFlag reports whether args (before any "--") set the boolean
// flag name, as -name, --name or with =true.
func hasBoolFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		switch strings.TrimLeft(a, "-") {
		case name, name + "=true":
			if strings.HasPrefix(a, "-") {
				return true
			}
		}
	}
	return false
}

// CommandFirst moves the log flags given before the command (-v, -q,
// --log-format X), as in `writer --log-format json inspect ...`, to after
// it, where the command's flag set reads them; with no command after
// them, nothing is left (the caller prints its usage).
func CommandFirst(args []string) []string {
	var lead []string
	i := 0
	for i < len(args) {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-"):
		case name == "v" || name == "q":
			lead, i = append(lead, a), i+1
			continue
		case name == "log-format" && hasValue:
			lead, i = append(lead, a), i+1
			continue
		case name == "log-format" && i+1 < len(args):
			lead, i = append(lead, a, args[i+1]), i+2
			continue
		}
		break
	}
	if len(lead) == 0 {
		return args
	}
	if i >= len(args) {
		return nil
	}
	out := append([]string{args[i]}, lead...)
	return append(out, args[i+1:]...)
}

// Service reports whether args, a command line of cmd, run until stopped
// rather than to an end: cmd is one of services and none of ends (flags
// that make it a one-shot job, such as --until-drained) is set.
func Service(args []string, services, ends []string) bool {
	if len(args) == 0 || !slices.Contains(services, args[0]) {
		return false
	}
	for _, e := range ends {
		if hasBoolFlag(args[1:], e) {
			return false
		}
	}
	return true
}

// NewLogger writes on stderr in format (LogText or LogJSON: one object
// per line), WARN and above unless verbose.
func NewLogger(stderr io.Writer, verbose bool, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelWarn}
	if verbose {
		opts.Level = slog.LevelInfo
	}
	if format == LogJSON {
		return slog.New(slog.NewJSONHandler(stderr, opts))
	}
	return slog.New(slog.NewTextHandler(stderr, opts))
}

// JSON writes v as one indented JSON object on w.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Multi collects a repeated flag.
type Multi []string

func (m *Multi) String() string     { return strings.Join(*m, ",") }
func (m *Multi) Set(v string) error { *m = append(*m, v); return nil }

// Flags lists the names of fs's flags, sorted.
func Flags(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	slices.Sort(names)
	return names
}

// Verbose reports whether args ask for -v, so that the logger can be
// made before the command's flags are parsed.
func Verbose(args []string) bool {
	for _, a := range args {
		switch a {
		case "-v", "--v", "-v=true", "--v=true":
			return true
		case "--":
			return false
		}
	}
	return false
}

// Printf writes a human summary line.
func Printf(w io.Writer, format string, args ...any) { fmt.Fprintf(w, format, args...) }
