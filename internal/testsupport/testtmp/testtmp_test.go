package testtmp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSweepRemovesOnlyDeadRuns: a run directory whose owner died is
// removed at the next start; one whose owner lives is kept.
func TestSweepRemovesOnlyDeadRuns(t *testing.T) {
	base := t.TempDir()
	live, release, err := enter(base)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := os.WriteFile(filepath.Join(live, "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A dead run: a child process takes the lock and is killed, as go
	// test's timeout kills a test binary.
	dead := filepath.Join(base, "run-dead")
	if err := os.MkdirAll(filepath.Join(dead, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dead, lockName)
	cmd := exec.Command("flock", "-x", "-o", lock, "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // killed as a group: flock and its sleep
	if err := cmd.Start(); err != nil {
		t.Fatalf("flock(1) is needed for this test: %v", err)
	}
	// Wait until the child holds the lock, then check it counts as live.
	for i := 0; ; i++ {
		if _, err := os.Stat(lock); err == nil && !stale(dead) {
			break
		}
		if i > 500 {
			t.Fatal("the child never took the lock")
		}
		exec.Command("sleep", "0.01").Run()
	}
	Sweep(base)
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("a locked run directory was swept: %v", err)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	// The kernel drops a dead holder's lock when its last descriptor is
	// closed; on a loaded machine, give that a moment (CI once swept
	// while the lock was still held, and the directory stayed).
	for i := 0; !stale(dead); i++ {
		if i > 500 {
			t.Fatal("the lock is still held after its holder was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}

	Sweep(base)
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("a dead run's directory survived the sweep: %v", err)
	}
	if _, err := os.Stat(filepath.Join(live, "data")); err != nil {
		t.Fatalf("the live run's directory was swept: %v", err)
	}
}

// TestMainSetsTMPDIR: the tests of a package using Main see TMPDIR inside
// their own run directory.
func TestMainSetsTMPDIR(t *testing.T) {
	dir := os.Getenv("TMPDIR")
	if !strings.HasPrefix(filepath.Base(filepath.Dir(dir)), "specstar-tests-") {
		t.Fatalf("TMPDIR = %q, want a run directory under specstar-tests-UID", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, lockName)); err != nil {
		t.Fatalf("the run directory has no lock: %v", err)
	}
}

func TestMain(m *testing.M) { Main(m) }
