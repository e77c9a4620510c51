package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestToATypoOfADeploymentIsRefused (issue 34, smaller items): with a
// config naming deployments, `--to mirorr`, a typo of `mirror`, wrote a
// new ./mirorr and exited 0 while the mirror meant stayed behind. A bare
// word that is neither a deployment nor an existing path is refused,
// naming the deployments; ./NAME still makes a new directory, and an
// existing directory is still taken.
func TestToATypoOfADeploymentIsRefused(t *testing.T) {
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := filepath.Join(dir, "specstar.yaml")
	yaml := "nats:\n  url: " + bus.URL() + "\ndeployments:\n  mirror:\n    meta: disk:" + filepath.Join(dir, "mirror") + "\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir("existing", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		to   string
		want int
		says string
	}{
		{"mirorr", exitError, `"mirorr" is not a deployment of config ` + cfg + ` (mirror)`},
		{"./mirorr", exitOK, ""},
		{"existing", exitOK, ""},
		{"mirror", exitOK, ""},
	} {
		code, out, errs := runCmd(t, "run", "--config", cfg, "--to", c.to, "--until-drained", "--listen", "")
		if code != c.want || !strings.Contains(errs, c.says) {
			t.Errorf("run --to %s: exit %d, want %d saying %q\n%s%s", c.to, code, c.want, c.says, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "mirorr", "issue")); err != nil {
		t.Errorf("./mirorr was not written: %v", err)
	}
}
