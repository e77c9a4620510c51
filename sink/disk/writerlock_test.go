package disk

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holderEnv names the root a child test process holds open as a writer
// (TestWriterLockHolder) until it is killed.
const holderEnv = "SPECSTAR_TEST_HOLD_DISK_ROOT"

// TestWriterLockHolder is the child of TestSecondWriterIsRefused: with
// holderEnv set it opens that root for writing, says so, and waits to be
// killed; run normally it has nothing to do.
func TestWriterLockHolder(t *testing.T) {
	root := os.Getenv(holderEnv)
	if root == "" {
		return // only a child process holds the lock
	}
	if _, err := Open(context.Background(), root, Options{}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("holding\n")
	time.Sleep(time.Minute)
}

// TestSecondWriterIsRefused: while another process writes a disk root, a
// second writer's Open fails at once with an error naming the root and
// the lock (a reader's does not); once that process is killed (kill -9:
// no Close, the lock file stays), the next writer opens the root.
func TestSecondWriterIsRefused(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriterLockHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), holderEnv+"="+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "holding\n" {
		t.Fatalf("the holder did not start: %q %v", line, err)
	}

	start := time.Now()
	_, err = Open(context.Background(), root, Options{})
	var locked *WriterLockedError
	if !errors.As(err, &locked) {
		t.Fatalf("second writer: %v, want a WriterLockedError", err)
	}
	lock := filepath.Join(root, ".specstar-tmp", "writer.lock")
	if msg := err.Error(); !strings.Contains(msg, root) || !strings.Contains(msg, lock) {
		t.Errorf("the error does not name the root and the lock: %s", msg)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the refusal took %v, want it at once", d)
	}
	r, err := Open(context.Background(), root, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("a reader is refused while a writer holds the root: %v", err)
	}
	r.Close()

	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no Close runs
		t.Fatal(err)
	}
	cmd.Wait()
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("the killed holder's lock file is gone (%v); the test no longer tests a stale lock", err)
	}
	d, err := Open(context.Background(), root, Options{})
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".specstar-tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a closed writer left its staging directory (and lock): %v", err)
	}
}
