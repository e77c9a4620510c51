// Package gobuild builds a command once per test binary, so the tests that
// run it as a real process share one build (linking takes seconds).
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Cache holds one build per package path; a test package keeps one.
type Cache struct {
	builds sync.Map // package path -> func() (string, error)
}

// Binary builds the command in pkg (as `go build` takes it, relative to
// the test's package) into the run's temporary directory, named name, the
// first time it is asked for, and returns its path.
func (c *Cache) Binary(tb testing.TB, pkg, name string) string {
	tb.Helper()
	build, _ := c.builds.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
		// The run's temporary directory (testtmp), removed when it ends.
		dir, err := os.MkdirTemp("", "bin-")
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
		return bin, nil
	}))
	bin, err := build.(func() (string, error))()
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}
