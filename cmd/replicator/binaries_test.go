package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builtBinaries holds one build per package for the whole test binary:
// linking a command takes seconds, and a dozen tests run each one.
var builtBinaries sync.Map // package path -> func() (string, error)

// buildBinary builds the command in pkg once per test binary, into the
// run's temporary directory (testtmp), and returns its path.
func buildBinary(tb testing.TB, pkg, name string) string {
	tb.Helper()
	build, _ := builtBinaries.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
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

// buildReplicator is this package's command, built once.
func buildReplicator(tb testing.TB) string { return buildBinary(tb, ".", "replicator") }

// buildWriter is the writer command, built once.
func buildWriter(tb testing.TB) string { return buildBinary(tb, "../writer", "writer") }
