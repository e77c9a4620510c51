package k8s_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the module's root, the Dockerfile's build context.
const repoRoot = "../.."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// stage is one FROM ... of a multi-stage Dockerfile.
type stage struct {
	from, name string
	body       []instruction
}

// parseDockerfile splits a Dockerfile into its stages.
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the Dockerfile: %v", err)
	}
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			return
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %s before the first FROM", path, in.cmd)
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return stages
}

// shellWords splits a RUN line the way sh would for plain words and
// single- or double-quoted strings (no expansions: the test refuses them).
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	if strings.ContainsAny(s, "$`;&|<>") {
		t.Fatalf("RUN %s: the build line should be one plain command", s)
	}
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("RUN %s: unterminated quote", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// imageBuild is what the Dockerfile says about the image it builds.
type imageBuild struct {
	stages  []stage
	env     []string // the build stage's ENV, as NAME=value
	goBuild []string // the build stage's `go build` command line
	outDir  string   // its -o
}

func readImageBuild(t *testing.T) imageBuild {
	t.Helper()
	stages := parseDockerfile(t, "Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a multi-stage build (a Go builder, then the runtime image)", len(stages))
	}
	b := imageBuild{stages: stages}
	for _, in := range stages[0].body {
		switch in.cmd {
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				b.env = append(b.env, strings.ReplaceAll(kv, `"`, ""))
			}
		case "RUN":
			if w := shellWords(t, in.args); len(w) > 1 && w[0] == "go" && w[1] == "build" {
				if b.goBuild != nil {
					t.Fatalf("Dockerfile: two go build lines in the build stage")
				}
				b.goBuild = w
			}
		}
	}
	if b.goBuild == nil {
		t.Fatalf("Dockerfile: the build stage %q runs no go build", stages[0].from)
	}
	i := slices.Index(b.goBuild, "-o")
	if i < 0 || i+1 >= len(b.goBuild) {
		t.Fatalf("Dockerfile: go build has no -o DIR: %q", b.goBuild)
	}
	b.outDir = b.goBuild[i+1]
	return b
}

// TestDockerfile checks the image's build as a reader would: a Go
// builder of go.mod's Go version, static binaries (CGO_ENABLED=0,
// -trimpath), a runtime stage that copies both binaries onto the PATH and
// runs as a numeric non-root user, and the README's build command
// tagging the image the manifests run.
func TestDockerfile(t *testing.T) {
	b := readImageBuild(t)
	builder := b.stages[0]
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(gomod))
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	if want := "golang:" + goVersion[1]; builder.from != want && !strings.HasPrefix(builder.from, want+"-") && !strings.HasPrefix(builder.from, want+".") {
		t.Errorf("Dockerfile: builder image %s, want %s (go.mod's go %s)", builder.from, want, goVersion[1])
	}
	if builder.name == "" {
		t.Errorf("Dockerfile: the builder stage has no name (FROM ... AS build)")
	}
	if !slices.Contains(b.env, "CGO_ENABLED=0") {
		t.Errorf("Dockerfile: the build stage's ENV %q lacks CGO_ENABLED=0 (static binaries)", b.env)
	}
	for _, want := range []string{"-trimpath", "./cmd/replicator", "./cmd/writer"} {
		if !slices.Contains(b.goBuild, want) {
			t.Errorf("Dockerfile: go build %q lacks %s", b.goBuild, want)
		}
	}
	final := b.stages[len(b.stages)-1]
	var user string
	var copied []string
	for _, in := range final.body {
		switch in.cmd {
		case "USER":
			user = in.args
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) >= 3 && f[0] == "--from="+builder.name {
				dst := f[len(f)-1]
				for _, src := range f[1 : len(f)-1] {
					copied = append(copied, filepath.Join(dst, filepath.Base(src)))
				}
			}
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("Dockerfile: the runtime stage's USER is %q, want a numeric non-root uid (runAsNonRoot checks numbers)", user)
	}
	for _, bin := range []string{"replicator", "writer"} {
		if !slices.Contains(copied, "/usr/local/bin/"+bin) {
			t.Errorf("Dockerfile: the runtime stage copies %q from the builder, want /usr/local/bin/%s (on the PATH, as the manifests' command: [%s] needs)", copied, bin, bin)
		}
	}
	if img := readmeImage(t); !strings.Contains(mustRead(t, "Dockerfile"), "-t "+img+" .") {
		t.Errorf("Dockerfile: its build command comment does not tag %s, the README's image", img)
	}
}

// readmeImage is the image the README's deploy section builds:
// docker build -f deploy/k8s/Dockerfile -t IMAGE .
func readmeImage(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`docker build -f deploy/k8s/Dockerfile -t (\S+) \.`).FindStringSubmatch(mustRead(t, filepath.Join(repoRoot, "docs", "kubernetes.md")))
	if m == nil {
		t.Fatal("docs/kubernetes.md: no `docker build -f deploy/k8s/Dockerfile -t IMAGE .` command")
	}
	return m[1]
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// buildImageBinaries runs the Dockerfile's go build line, with its ENV,
// from the repository's root into a directory of this test run (TestMain
// gives each run its own $TMPDIR, removed at the end), and returns that
// directory, holding replicator and writer. The tests that need the
// binaries share one build.
func buildImageBinaries(t *testing.T) string {
	t.Helper()
	b := readImageBuild(t)
	out := filepath.Join(os.TempDir(), "image-binaries")
	_, errR := os.Stat(filepath.Join(out, "replicator"))
	_, errW := os.Stat(filepath.Join(out, "writer"))
	if errR == nil && errW == nil {
		return out
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(b.goBuild)
	args[slices.Index(args, "-o")+1] = out + "/"
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), b.env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's %q: %v\n%s", args, err, msg)
	}
	return out
}

// TestImageBinariesAreStatic: the Dockerfile's own go build line yields
// binaries with no program interpreter and no dynamic section, so they
// run on distroless/static (no C library).
func TestImageBinariesAreStatic(t *testing.T) {
	dir := buildImageBinaries(t)
	for _, bin := range []string{"replicator", "writer"} {
		f, err := elf.Open(filepath.Join(dir, bin))
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s: has a %v program header: dynamically linked", bin, p.Type)
			}
		}
		if s := f.Section(".dynamic"); s != nil {
			t.Errorf("%s: has a .dynamic section: dynamically linked", bin)
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s: needs shared libraries %q", bin, libs)
		}
		f.Close()
	}
}
