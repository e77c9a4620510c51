package disk

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/internal/store"
)

// fakeWriterStaging makes the staging directory (with a half-written file)
// and lock file of a writer with the given id below root, as a writer in
// another PID namespace would: its pid answers nothing here.
func fakeWriterStaging(t *testing.T, root, id string) (dir, lock string) {
	t.Helper()
	dir = filepath.Join(root, store.StagingDir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, store.TmpPrefix+"inflight"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	lock = dir + lockSuffix
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, lock
}

// holdLock starts `flock -o lock sh -c ...`, a child process that holds the
// flock on lock until the test ends, and waits until it has it.
func holdLock(t *testing.T, lock string) {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) from util-linux is not installed")
	}
	cmd := exec.Command("flock", "-o", lock, "sh", "-c", "echo locked; exec sleep 60")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("flock child: %q, %v", line, err)
	}
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

func openT(t *testing.T, root string, opts Options) *Sink {
	t.Helper()
	d, err := Open(context.Background(), root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestStagingOfLiveWriterInOtherPIDNamespaceSurvives (issue 12, item 11):
// opening a disk sink deleted every staging directory whose name was not
// a pid answering kill(pid, 0), so a live writer in another PID namespace
// (a sidecar, a Job on the same volume, NFS) lost its files. Now a staging
// directory goes only if its owner's lock can be taken.
func TestStagingOfLiveWriterInOtherPIDNamespaceSurvives(t *testing.T) {
	root := t.TempDir()
	// A pid that runs nowhere here, like a writer's in another namespace.
	dir, lock := fakeWriterStaging(t, root, "4194000-0a0b0c0d")
	holdLock(t, lock)
	if err := openT(t, root, Options{}).Close(); err != nil {
		t.Fatal(err)
	}
	openT(t, root, Options{ReadOnly: true})
	if !exists(t, dir) || !exists(t, lock) || !exists(t, filepath.Join(dir, store.TmpPrefix+"inflight")) {
		t.Fatalf("a live writer's staging directory %s was swept by an Open", dir)
	}

	// A writer of this process keeps its own too, against another Open
	// (which the tree's writer lock refuses now, before it sweeps). The
	// second meta replaces the first, through staging (a new file is
	// linked in whole, without it).
	w := openT(t, root, Options{})
	for _, at := range []string{"2024-05-01T00:00:00Z", "2024-05-02T00:00:00Z"} {
		if _, err := w.ApplyMeta(context.Background(), "issue", sinktestutil.Meta(t, "issue:1", at, 1, "a")); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(context.Background()); err != nil { // metas are written at Flush
			t.Fatal(err)
		}
	}
	var locked *WriterLockedError
	if _, err := Open(context.Background(), root, Options{}); !errors.As(err, &locked) {
		t.Fatalf("a second writer's Open: %v, want a WriterLockedError", err)
	}
	if !exists(t, w.tmpDir) {
		t.Fatalf("an open writer's staging directory %s was swept", w.tmpDir)
	}
}

// TestStagingSweptOnlyByWriters (issue 12, item 11): a staging directory
// whose lock is free (its writer is gone) was swept by any Open, the
// read-only ones of verify and reconcile included; now only a writer's
// Open sweeps it, and a read-only Open changes nothing.
func TestStagingSweptOnlyByWriters(t *testing.T) {
	root := t.TempDir()
	dir, lock := fakeWriterStaging(t, root, "4194000-0a0b0c0d")
	legacy := filepath.Join(root, store.StagingDir, "4194001") // an older writer's, no lock
	if err := os.MkdirAll(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	r := openT(t, root, Options{ReadOnly: true})
	if !exists(t, dir) || !exists(t, lock) || !exists(t, legacy) {
		t.Fatal("a read-only Open swept staging directories")
	}
	if _, err := r.ApplyMeta(context.Background(), "issue", sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a")); err == nil {
		t.Fatal("a read-only sink applied a meta")
	}
	if exists(t, filepath.Join(root, "issue")) {
		t.Fatal("a read-only sink wrote")
	}
	if _, err := Open(context.Background(), filepath.Join(root, "missing"), Options{ReadOnly: true}); err == nil || exists(t, filepath.Join(root, "missing")) {
		t.Fatalf("a read-only Open of a missing root: %v (created: %v)", err, exists(t, filepath.Join(root, "missing")))
	}

	openT(t, root, Options{})
	if exists(t, dir) || exists(t, lock) || exists(t, legacy) {
		t.Fatal("a writer's Open left a dead writer's staging directory")
	}
}

// TestWriterRecreatesItsStagingDirectory (issue 12, item 11): a writer
// whose staging directory was removed under it (by an older sweeper, by
// hand) failed every write after that, forever; now it recreates the
// directory, retakes its lock, and the next write succeeds.
func TestWriterRecreatesItsStagingDirectory(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	w := openT(t, root, Options{})
	apply := func(i int) {
		t.Helper()
		rid := fmt.Sprintf("issue:%d", i)
		// The second, newer meta replaces the first through staging.
		for _, at := range []string{"2024-05-01T00:00:00Z", "2024-05-02T00:00:00Z"} {
			if _, err := w.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, rid, at, 1, "a")); err != nil {
				t.Fatalf("meta %s: %v", rid, err)
			}
			if err := w.Flush(ctx); err != nil { // metas are written at Flush
				t.Fatalf("flush meta %s: %v", rid, err)
			}
		}
		r := sinktestutil.Revision(t, rid, rid+":1", fmt.Sprintf("cccccccc-0000-4000-8000-%012d", i), events.Null[string](), events.Opt[string]{}, "2024-05-01T00:00:00Z", `{}`)
		if _, err := w.ApplyRevision(ctx, "issue", r); err != nil {
			t.Fatalf("revision %s: %v", rid, err)
		}
	}
	apply(1)
	if err := os.RemoveAll(filepath.Join(root, store.StagingDir)); err != nil {
		t.Fatal(err)
	}
	apply(2)
	if err := os.RemoveAll(w.tmpDir); err != nil { // the directory alone, lock kept
		t.Fatal(err)
	}
	apply(3)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Its locks were retaken: another writer's Open is refused and leaves
	// its directory alone.
	var locked *WriterLockedError
	if _, err := Open(ctx, root, Options{}); !errors.As(err, &locked) {
		t.Fatalf("another writer's Open: %v, want a WriterLockedError", err)
	}
	if !exists(t, w.tmpDir) || !exists(t, w.tmpDir+lockSuffix) {
		t.Fatal("the recreated staging directory is not protected by a lock")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(t, filepath.Join(root, store.StagingDir)) {
		t.Fatal("a closed writer left its staging directory")
	}
}

// TestReservedModelNames (issue 12, item 12): a model named .specstar-tmp
// was accepted and written into the staging directory, where the next
// writer's Open swept it away; so was a model named like the sink's
// temporary names (.tmp-*, .tmp-purge-*). They are InvalidErrors now and
// nothing is written.
func TestReservedModelNames(t *testing.T) {
	ctx := context.Background()
	for _, model := range []string{store.StagingDir, store.TmpPrefix + "purge-0123", store.TmpPrefix + "x", store.BlobsDir} {
		for _, mode := range metaModes {
			root := t.TempDir()
			d := openT(t, root, mode.opts)
			_, err := d.ApplyMeta(ctx, model, sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a"))
			if !store.IsInvalid(err) {
				t.Errorf("%s: meta of model %q: %v, want an InvalidError", mode.name, model, err)
			}
			r := sinktestutil.Revision(t, "issue:1", "issue:1:1", "cccccccc-0000-4000-8000-000000000001", events.Null[string](), events.Opt[string]{}, "2024-05-01T00:00:00Z", `{}`)
			if _, err := d.ApplyRevision(ctx, model, r); !store.IsInvalid(err) {
				t.Errorf("%s: revision of model %q: %v, want an InvalidError", mode.name, model, err)
			}
			if _, err := d.ApplyPurge(ctx, model, "issue:1", r.Info.UpdatedTime); !store.IsInvalid(err) {
				t.Errorf("%s: purge of model %q: %v, want an InvalidError", mode.name, model, err)
			}
			if err := d.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var written []string
			lock := filepath.Join(root, store.StagingDir, WriterLockName)
			_ = filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
				if p != root && p != lock && p != filepath.Dir(lock) { // the open writer's lock is expected
					written = append(written, p)
				}
				return err
			})
			if len(written) > 0 {
				t.Errorf("%s: model %q: written %v", mode.name, model, written)
			}
		}
	}
}

// TestWriterLockSurvivesDeletedLockFile is issue 26 item 10: deleting the
// writer lock file (or the whole staging directory) under a live writer
// let a second writer open the same tree. The root directory's own lock
// still refuses it, and once the first writer closes, the next one opens.
func TestWriterLockSurvivesDeletedLockFile(t *testing.T) {
	ctx := context.Background()
	for _, remove := range []string{WriterLockName, ""} {
		root := t.TempDir()
		w, err := Open(ctx, root, Options{})
		if err != nil {
			t.Fatal(err)
		}
		victim := filepath.Join(root, store.StagingDir, remove)
		if err := os.RemoveAll(victim); err != nil {
			t.Fatal(err)
		}
		var locked *WriterLockedError
		if second, err := Open(ctx, root, Options{}); !errors.As(err, &locked) {
			if second != nil {
				second.Close()
			}
			t.Fatalf("after removing %s under a live writer, a second writer's Open: %v, want a WriterLockedError", victim, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		next, err := Open(ctx, root, Options{})
		if err != nil {
			t.Fatalf("Open after the writer closed: %v", err)
		}
		if err := next.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
