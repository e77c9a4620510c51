package testsupport_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayout: the commands link nothing of internal/testsupport, and every
// other package of internal/ is one they link (else it belongs here).
func TestLayout(t *testing.T) {
	const module = "github.com/specstar/replicator/"
	out, err := exec.Command("go", "list", "-deps", "../../cmd/...").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/...: %v", err)
	}
	linked := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		linked[p] = true
		if strings.HasPrefix(p, module+"internal/testsupport") {
			t.Errorf("the commands link %s, which is test support", p)
		}
	}
	dirs, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "testsupport" {
			continue
		}
		if files, _ := filepath.Glob(filepath.Join("..", d.Name(), "*.go")); len(files) == 0 {
			continue
		}
		if p := module + "internal/" + d.Name(); !linked[p] {
			t.Errorf("%s is in internal/ but no command links it: move it under internal/testsupport", p)
		}
	}
}
