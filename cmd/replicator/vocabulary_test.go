package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/cli"
)

// helpOf runs `replicator <command...> --help`, checks it exits 0 with a
// usage line and examples on stdout, and returns the command's flag set.
func helpOf(t *testing.T, run func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) int, args ...string) *flag.FlagSet {
	t.Helper()
	var got *flag.FlagSet
	cli.ParseHook = func(_ *cli.Command, fs *flag.FlagSet) { got = fs }
	defer func() { cli.ParseHook = nil }()
	var out, errs bytes.Buffer
	code := run(context.Background(), append(args, "--help"), &out, &errs)
	if code != exitOK || !strings.HasPrefix(out.String(), "usage: ") || !strings.Contains(out.String(), "\nexamples:\n") {
		t.Errorf("%v --help: exit %d, want 0 with a usage line and examples\n%s%s", args, code, out.String(), errs.String())
	}
	if got == nil {
		t.Fatalf("%v --help built no flag set", args)
	}
	return got
}

// TestVocabularyMatchesREADME: every command's source and sink flags, and
// its deprecated spellings, are those of the README's table; every
// command's --help exits 0 with examples.
func TestVocabularyMatchesREADME(t *testing.T) {
	readme, err := os.ReadFile("../../docs/reference/command-line.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := cli.ParseVocabulary(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	runBuf := func(ctx context.Context, args []string, out, errs *bytes.Buffer) int {
		return run(ctx, args, out, errs)
	}
	n := 0
	for name := range commands {
		row, ok := rows["replicator "+name]
		if !ok {
			t.Errorf("the README's vocabulary table has no row for replicator %s", name)
			continue
		}
		fs := helpOf(t, runBuf, strings.Fields(name)...)
		for _, bad := range cli.CheckVocabulary("replicator "+name, fs, row) {
			t.Error(bad)
		}
		n++
	}
	for name := range rows {
		if c, ok := strings.CutPrefix(name, "replicator "); ok && commands[c] == nil {
			t.Errorf("the README lists %s, which is no command", name)
		}
	}
	if n < 9 {
		t.Errorf("checked %d commands", n)
	}
	// help CMD, and the bare groups.
	for _, args := range [][]string{{"help", "run"}, {"help", "dlq", "list"}, {"dlq", "--help"}, {"stream", "--help"}, {"--help"}} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != exitOK || !strings.Contains(out.String(), "usage: ") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out.String(), errs.String())
		}
	}
}

// TestDeprecatedSpellings: an old spelling still works, warns once on
// stderr and is marked in --help.
func TestDeprecatedSpellings(t *testing.T) {
	fs := helpOf(t, func(ctx context.Context, args []string, out, errs *bytes.Buffer) int {
		return run(ctx, args, out, errs)
	}, "verify")
	if f := fs.Lookup("archive"); f == nil || !strings.Contains(f.Usage, "(deprecated: use --from)") {
		t.Errorf("verify --archive: %+v", f)
	}
	archive := "../../testdata/sample.acbak"
	code, out, errs := runCmd(t, "verify", "--archive", archive, "--sink", t.TempDir())
	if code != exitDiffer || strings.Count(errs, "deprecated") != 1 || !strings.Contains(errs, "--archive is deprecated: use --from") {
		t.Errorf("verify --archive: exit %d\n%s%s", code, out, errs)
	}
}

// TestExitCodes: 0 done or equal, 1 differences or invalid input, 2 usage
// or operational error, the same in every command.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	archive := "../../testdata/sample.acbak"
	notArchive := dir + "/not.acbak"
	os.WriteFile(notArchive, []byte("hello, this is no archive\n"), 0o644)
	mirror := t.TempDir()
	if code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", mirror, "--data-dir", t.TempDir()); code != exitOK {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"verify", "--from", archive, "--to", mirror}, exitOK},
		{[]string{"verify", "--from", archive, "--to", t.TempDir()}, exitDiffer},
		{[]string{"reconcile", "--from", archive, "--to", mirror, "--dry-run"}, exitOK},
		{[]string{"reconcile", "--from", archive, "--to", t.TempDir(), "--dry-run"}, exitDiffer},
		{[]string{"mirror", "--from", notArchive, "--to", t.TempDir(), "--data-dir", t.TempDir()}, exitDiffer},
		{[]string{"verify", "--from", archive}, exitError},
		{[]string{"verify", "--bogus"}, exitError},
		{[]string{"verify", "--from", archive, "--to", dir + "/missing"}, exitError},
		{[]string{"run"}, exitError},
		{[]string{"nonsense"}, exitError},
		{[]string{}, exitError},
	} {
		if code, out, errs := runCmd(t, c.args...); code != c.want {
			t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.want, out, errs)
		}
	}
}

// TestExitCodeRule (issue 25 item 3): the one rule, every command given
// bad input. A missing or invalid archive is 1 wherever it is read (it was
// 2 in verify and mirror, 1 in the writer); a flag no command has, an
// unexpected argument or a mistyped scheme is 2; an error that is no usage
// error is printed once, on one line (item 4).
func TestExitCodeRule(t *testing.T) {
	dir := t.TempDir()
	notArchive := dir + "/README.md"
	os.WriteFile(notArchive, []byte("# not an archive\n\nthese are notes\n"), 0o644)
	missing := dir + "/missing.acbak"
	sinkDir := t.TempDir()
	type tc struct {
		args []string
		want int
	}
	var cases []tc
	for name := range commands {
		cases = append(cases, tc{append(strings.Fields(name), "--bogus-flag"), exitError})
	}
	for _, cmd := range [][]string{{"verify"}, {"reconcile", "--dry-run"}} {
		with := func(args ...string) []string { return append(append([]string{}, cmd...), args...) }
		cases = append(cases,
			tc{with("--from", missing, "--to", sinkDir), exitDiffer},
			tc{with("--from", notArchive, "--to", sinkDir), exitDiffer},
			tc{with("--from", "dsk:"+dir, "--to", sinkDir), exitError},
			tc{with("--from", missing, "--to", "dsk:"+sinkDir), exitError},
		)
	}
	target := filepath.Join(t.TempDir(), "target")
	cases = append(cases,
		tc{[]string{"mirror", "--from", missing, "--to", target, "--data-dir", t.TempDir()}, exitDiffer},
		tc{[]string{"mirror", "--from", notArchive, "--to", target, "--data-dir", t.TempDir()}, exitDiffer},
		tc{[]string{"mirror", "--from", notArchive, "--to", "dsk:" + target, "--data-dir", t.TempDir()}, exitError},
		tc{[]string{"mirror", "--from", notArchive, "--to", target, "extra-arg"}, exitError},
		tc{[]string{"run", "--to", "dsk:" + target, "--until-drained"}, exitError},
	)
	for _, c := range cases {
		code, out, errs := runCmd(t, c.args...)
		if code != c.want {
			t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.want, out, errs)
			continue
		}
		if strings.Contains(errs, "level=WARN") {
			t.Errorf("%v: the error is also logged:\n%s", c.args, errs)
		}
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if n := strings.Count(errs, missing); n > 1 {
			t.Errorf("%v: the path is printed %d times:\n%s", c.args, n, errs)
		}
		if c.want == exitDiffer && len(lines) != 1 {
			t.Errorf("%v: %d lines on stderr, want the error once, on one line:\n%s", c.args, len(lines), errs)
		}
		if strings.Contains(strings.Join(c.args, " "), "dsk:") && !strings.Contains(errs, "unknown scheme") {
			t.Errorf("%v: a mistyped scheme is not refused as one:\n%s", c.args, errs)
		}
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("the failed mirrors left their target %s behind (%v)", target, err)
	}
	if _, err := os.Stat("dsk:" + target); !os.IsNotExist(err) {
		t.Errorf("--to dsk:%s made a directory of that name (%v)", target, err)
	}
	if _, _, errs := runCmd(t, "mirror", "--from", notArchive, "--to", target, "extra-arg"); !strings.Contains(errs, `unexpected arguments ["extra-arg"]`) {
		t.Errorf("mirror with an extra argument does not say so:\n%s", errs)
	}
}
