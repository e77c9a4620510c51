package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestWriterVocabularyMatchesREADME: every writer command's source and
// sink flags are those of the README's table, and its --help exits 0
// with examples.
func TestWriterVocabularyMatchesREADME(t *testing.T) {
	readme, err := os.ReadFile("../../docs/reference/command-line.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := cli.ParseVocabulary(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	for name := range commands {
		var got *flag.FlagSet
		cli.ParseHook = func(_ *cli.Command, fs *flag.FlagSet) { got = fs }
		var out, errs bytes.Buffer
		code := run(context.Background(), []string{name, "--help"}, &out, &errs)
		cli.ParseHook = nil
		if code != exitOK || !strings.Contains(out.String(), "\nexamples:\n") || got == nil {
			t.Errorf("writer %s --help: exit %d\n%s%s", name, code, out.String(), errs.String())
			continue
		}
		row, ok := rows["writer "+name]
		if !ok {
			t.Errorf("the README's vocabulary table has no row for writer %s", name)
			continue
		}
		for _, bad := range cli.CheckVocabulary("writer "+name, got, row) {
			t.Error(bad)
		}
	}
}

// TestExportDiskMirror: archive -> replicator mirror -> writer export
// --from DIR gives back the archive's records; an existing output is
// refused without --force; the archive is 0644.
func TestExportDiskMirror(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	for _, name := range []string{"small.acbak", "blobs.acbak"} {
		t.Run(name, func(t *testing.T) {
			archive := testfixtures.Path(t, name)
			dir := t.TempDir()
			if out, err := execOut(repl, "mirror", "--from", archive, "--to", dir, "--data-dir", t.TempDir()); err != nil {
				t.Fatalf("mirror: %v\n%s", err, out)
			}
			exported := filepath.Join(t.TempDir(), "export.acbak")
			if code, out, errs := runWriter(t, "export", "--from", dir, "--to", exported); code != exitOK {
				t.Fatalf("export: %d\n%s%s", code, out, errs)
			}
			want, got := recordSet(t, archive), recordSet(t, exported)
			if len(want) == 0 || len(got) != len(want) {
				t.Fatalf("exported %d distinct records, the archive holds %d", len(got), len(want))
			}
			for k := range want {
				if !got[k] {
					t.Errorf("a record of the archive is missing from the export (%.60q)", k)
				}
			}
			if st, err := os.Stat(exported); err != nil || st.Mode().Perm() != 0o644 {
				t.Errorf("export mode: %v %v", st.Mode(), err)
			}
			if code, _, errs := runWriter(t, "export", "--from", dir, "--to", exported); code != exitError || !strings.Contains(errs, "--force") {
				t.Errorf("export over an existing file: exit %d\n%s", code, errs)
			}
			if code, _, errs := runWriter(t, "export", "--from", dir, "--to", exported, "--force"); code != exitOK {
				t.Errorf("export --force: exit %d\n%s", code, errs)
			}
		})
	}
	if code, _, errs := runWriter(t, "export", "--from", t.TempDir(), "--to", filepath.Join(t.TempDir(), "x.acbak")); code != exitDiffer || !strings.Contains(errs, "no models found (looked for") {
		t.Errorf("export of an empty tree: exit %d\n%s", code, errs)
	}
}

// TestNotAnArchive: a file that is not an archive says so.
func TestNotAnArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(path, []byte("these are notes, not an archive\n"), 0o644)
	code, _, errs := runWriter(t, "inspect", "--from", path)
	if code != exitInvalid || !strings.Contains(errs, "not an .acbak archive: the first frame") {
		t.Errorf("inspect of a text file: exit %d\n%s", code, errs)
	}
}

// execOut runs a built binary and returns its combined output.
func execOut(bin string, args ...string) ([]byte, error) {
	return exec.Command(bin, args...).CombinedOutput()
}

// TestExitCodeRule (issue 25 item 3): the replicator's rule, every writer
// command given bad input: a missing or invalid archive is 1, a flag no
// command has or a mistyped scheme is 2, and an error that is no usage
// error is printed once, on one line (item 4).
func TestExitCodeRule(t *testing.T) {
	dir := t.TempDir()
	notArchive := filepath.Join(dir, "README.md")
	os.WriteFile(notArchive, []byte("# not an archive\n\nthese are notes\n"), 0o644)
	missing := filepath.Join(dir, "missing.acbak")
	out := filepath.Join(t.TempDir(), "out.acbak")
	data := t.TempDir()
	type tc struct {
		args []string
		want int
	}
	var cases []tc
	for name := range commands {
		cases = append(cases, tc{[]string{name, "--bogus-flag"}, exitUsage})
	}
	for _, from := range []string{missing, notArchive} {
		cases = append(cases,
			tc{[]string{"inspect", "--from", from}, exitInvalid},
			tc{[]string{"verify", "--from", from}, exitInvalid},
			tc{[]string{"replay", "--from", from, "--data-dir", data}, exitInvalid},
			tc{[]string{"export", "--from", from, "--to", out}, exitInvalid},
		)
	}
	cases = append(cases,
		tc{[]string{"export", "--from", "dsk:" + dir, "--to", out}, exitUsage},
		tc{[]string{"snapshot", "--from", "dsk:" + dir, "--data-dir", data}, exitUsage},
	)
	for _, c := range cases {
		code, stdout, errs := runWriter(t, c.args...)
		if code != c.want {
			t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.want, stdout, errs)
			continue
		}
		if strings.Contains(errs, "level=WARN") {
			t.Errorf("%v: the error is also logged:\n%s", c.args, errs)
		}
		if lines := strings.Split(strings.TrimSpace(errs), "\n"); c.want == exitInvalid && len(lines) != 1 {
			t.Errorf("%v: %d lines on stderr, want the error once, on one line:\n%s", c.args, len(lines), errs)
		}
		if strings.Contains(strings.Join(c.args, " "), "dsk:") && !strings.Contains(errs, "unknown scheme") {
			t.Errorf("%v: a mistyped scheme is not refused as one:\n%s", c.args, errs)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed export left %s (%v)", out, err)
	}
}

// TestTailIntervalSaysBothDefaults (issue 25 item 6): --interval's help
// gave 1 s where the text says a Redis rescan is every 5 s; it says both.
// replay takes --config as every other command does.
func TestTailIntervalSaysBothDefaults(t *testing.T) {
	_, out, _ := runWriter(t, "tail", "--help")
	i := strings.Index(out, "  --interval ")
	if i < 0 {
		t.Fatalf("tail --help lists no --interval:\n%s", out)
	}
	line, _, _ := strings.Cut(out[i+2:], "\n  --") // up to the next flag
	if !strings.Contains(line, `(default "1s")`) || !strings.Contains(line, "Redis: the rescan period, 5s unless given") {
		t.Errorf("--interval's help does not give both defaults: %q", line)
	}
	_, out, _ = runWriter(t, "replay", "--help")
	if !strings.Contains(out, "\n  --config ") {
		t.Errorf("replay --help lists no --config:\n%s", out)
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("nats:\n  stream: FROMCONFIG\n"), 0o644)
	code, stdout, errs := runWriter(t, "replay", "--config", cfg, "--from", "../../testdata/sample.acbak", "--data-dir", t.TempDir())
	if code != exitOK || !strings.Contains(stdout, "to stream FROMCONFIG") {
		t.Errorf("replay --config: exit %d, want the stream of the file\n%s%s", code, stdout, errs)
	}
}

// TestREADMEShowsCurrentSpellings (issue 25 item 6): no command line of
// the README uses a spelling its vocabulary table marks deprecated (they
// printed warnings when copied).
func TestREADMEShowsCurrentSpellings(t *testing.T) {
	table, err := os.ReadFile("../../docs/reference/command-line.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := cli.ParseVocabulary(string(table))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../../docs/reference/*.md")
	for _, f := range append(append(docs, more...), "../../README.md") {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range cli.DeprecatedUses(string(text), rows) {
			t.Errorf("%s: %s", f, bad)
		}
	}
}

// TestREADMEBuildsFirst (issue 25 item 7): the README's first command
// compiled silently for minutes (go run); it builds first and says so.
func TestREADMEBuildsFirst(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "```sh\n")
	first, _, _ := strings.Cut(block, "\n")
	if !strings.HasPrefix(first, "go build -o bin/ ./cmd/...") || !strings.Contains(first, "minutes") {
		t.Errorf("the README's first command line is %q, want go build -o bin/ ./cmd/... saying it takes minutes on a fresh machine", first)
	}
}
