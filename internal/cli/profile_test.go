package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartCPUProfile: without SPECSTAR_CPUPROFILE nothing is written;
// with it, the file holds a profile once stop returns, and a file that
// cannot be created is an error naming the variable.
func TestStartCPUProfile(t *testing.T) {
	t.Setenv(CPUProfileEnv, "")
	stop, err := StartCPUProfile()
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "cpu.pprof")
	t.Setenv(CPUProfileEnv, path)
	if stop, err = StartCPUProfile(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("profile %s: %v, %v", path, st, err)
	}

	t.Setenv(CPUProfileEnv, filepath.Join(t.TempDir(), "missing", "cpu.pprof"))
	if _, err := StartCPUProfile(); err == nil {
		t.Fatal("a profile that cannot be created started")
	}
}
