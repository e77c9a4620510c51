// Package docs_test runs the guides' walkthroughs and checks every link of
// the repository's Markdown, so the documentation cannot drift from the
// code or point nowhere.
package docs_test

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/testsupport/gobuild"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/testtmp"
)

func TestMain(m *testing.M) { testtmp.Main(m) }

var builds gobuild.Cache

// block is one fenced code block of a Markdown file.
type block struct {
	info string // the fence's info string: "sh", "sh not-run", "text"
	body string
	line int
}

// blocks returns the fenced blocks of md in order.
func blocks(md string) []block {
	var out []block
	var cur *block
	for i, l := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &block{info: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 1}
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body += l + "\n"
		}
	}
	return out
}

// scratch makes a directory holding bin/ (the built commands) and
// testdata (the repository's), as the guides expect.
func scratch(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"writer", "replicator"} {
		if err := os.Symlink(builds.Binary(t, "../cmd/"+c, c), filepath.Join(bin, c)); err != nil {
			t.Fatal(err)
		}
	}
	td, err := filepath.Abs("../testdata")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(td, filepath.Join(dir, "testdata")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// guideEnv is the environment a guide's script runs in: HOME is the
// scratch directory (so the embedded server's files are the test's own),
// and nothing of the caller's bus or configuration leaks in.
func guideEnv(dir string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "XDG_STATE_HOME", "NATS_URL", "SPECSTAR_CONFIG":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+dir), extra...)
}

// TestReplayGuide runs docs/replaying-an-archive.md's commands in order
// and checks that they print what the guide says they print.
func TestReplayGuide(t *testing.T) {
	md, err := os.ReadFile("replaying-an-archive.md")
	if err != nil {
		t.Fatal(err)
	}
	pg := pgtest.SharedDSN()
	sep := "?"
	if strings.Contains(pg, "?") {
		sep = "&"
	}
	pg += sep + "table_prefix=" + pgtest.Prefix(t) + "&revisions=true"
	runGuide(t, string(md), "GUIDE_PG="+pg)
}

// TestCatchUpGuide runs docs/catch-up-and-reconcile.md's walkthrough: a
// sink down while 2,240 events arrive catches up, and one that lost a
// model's directory is found by verify and repaired by reconcile.
func TestCatchUpGuide(t *testing.T) {
	md, err := os.ReadFile("catch-up-and-reconcile.md")
	if err != nil {
		t.Fatal(err)
	}
	runGuide(t, string(md))
}

// runGuide joins the guide's sh blocks into one script, runs it in a
// scratch directory, and checks each text block against the output.
func runGuide(t *testing.T, md string, extra ...string) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	var want []block
	for _, b := range blocks(md) {
		switch b.info {
		case "sh":
			script.WriteString(b.body)
		case "text":
			want = append(want, b)
		}
	}
	dir := scratch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = guideEnv(dir, extra...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("the guide's commands failed: %v\n%s", err, out)
	}
	for _, b := range want {
		for _, l := range strings.Split(strings.TrimRight(b.body, "\n"), "\n") {
			if strings.TrimSpace(l) == "" {
				continue
			}
			parts := strings.Split(l, "…")
			for i, p := range parts {
				parts[i] = regexp.QuoteMeta(p)
			}
			if !regexp.MustCompile("(?m)" + strings.Join(parts, ".*")).Match(out) {
				t.Errorf("line %d: the guide says the commands print\n  %s\nbut they printed:\n%s", b.line, l, out)
			}
		}
	}
}

// TestNotRunCommandLinesParse: every bin/writer and bin/replicator line of
// a block that is not run (it names hosts of the reader's own) is a
// command line the command's parser accepts.
func TestNotRunCommandLinesParse(t *testing.T) {
	dir := scratch(t)
	n := 0
	for _, f := range markdownFiles(t) {
		md, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks(string(md)) {
			if b.info != "sh not-run" {
				continue
			}
			for _, line := range commandLines(b.body) {
				if strings.Contains(line, "[--") || strings.Contains(line, "...|") || strings.Contains(line, "URL|") || strings.Contains(line, "$(") {
					continue // a synopsis, not a command line
				}
				cmd := exec.Command("bash", "-c", line)
				cmd.Dir = dir
				cmd.Env = guideEnv(dir, cli.ParseOnlyEnv+"=1")
				out, err := cmd.CombinedOutput()
				if err != nil || !bytes.Contains(out, []byte("command line accepted")) {
					t.Errorf("%s (block at line %d): %s\n%v: %s", f, b.line, line, err, out)
				}
				n++
			}
		}
	}
	if n < 20 {
		t.Errorf("checked only %d command lines", n)
	}
}

// commandLines returns the lines of body that run bin/writer or
// bin/replicator, continuation lines joined and comments cut.
func commandLines(body string) []string {
	var out []string
	joined := strings.ReplaceAll(body, "\\\n", " ")
	for _, l := range strings.Split(joined, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "bin/writer ") && !strings.HasPrefix(l, "bin/replicator ") {
			continue
		}
		if i := strings.Index(l, "   #"); i >= 0 {
			l = l[:i]
		} else if i := strings.Index(l, " # "); i >= 0 {
			l = l[:i]
		}
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

// markdownFiles lists the repository's own Markdown (not the fixtures').
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is GitHub's anchor for a heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && (unicode.IsLetter(r) || unicode.IsNumber(r)):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the heading anchors of a Markdown file (outside fences).
func anchors(md string) map[string]bool {
	a := map[string]bool{}
	fence := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		if m := regexp.MustCompile(`^#{1,6} (.*)$`).FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			for i := 1; a[s]; i++ {
				s = slug(m[1]) + "-" + string(rune('0'+i))
			}
			a[s] = true
		}
	}
	return a
}

// TestLinksResolve: every relative link of every Markdown file names a
// file that exists, and every #anchor a heading of that file.
func TestLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	if len(files) < 10 {
		t.Fatalf("found only %d Markdown files", len(files))
	}
	n := 0
	for _, f := range files {
		md, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(md), "")
		text = regexp.MustCompile("`[^`\n]*`").ReplaceAllString(text, "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if u, err := url.Parse(target); err == nil && u.Scheme != "" {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), path)
			}
			st, err := os.Stat(file)
			if err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			n++
			if frag == "" || st.IsDir() {
				continue
			}
			body, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(body))[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", f, target, file, frag)
			}
		}
	}
	if n < 20 {
		t.Errorf("checked only %d links", n)
	}
}
