package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/stream"
)

// TestEveryCommandTakesTheMirrorFlags (issue 34, item 2): in region B,
// `replicator status --mirror-of SPECSTAR --mirror-domain a` failed with
// "flag provided but not defined", although the README calls --mirror-of
// every command's flag. Every command that connects now takes the mirror
// flags with one meaning; each runs here in a mirror region with them.
func TestEveryCommandTakesTheMirrorFlags(t *testing.T) {
	ctx := context.Background()
	r := twoRegions(t)
	busA, err := stream.Open(ctx, stream.Config{URL: r.aURL, DataDir: t.TempDir()}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(busA.Close)
	archive := testfixtures.Path(t, "blobs.acbak") // a blob, through the mirrored object store
	replay(t, busA, archive)
	mirror := []string{"--nats", r.bURL, "--mirror-of", "SPECSTAR", "--mirror-domain", "a"}
	if code, out, errs := runCmd(t, append([]string{"stream", "apply"}, mirror...)...); code != exitOK {
		t.Fatalf("stream apply in region b: exit %d\n%s%s", code, out, errs)
	}
	waitCaughtUp(t, r.jsA, r.jsB)
	last, _ := streamState(ctx, r.jsB, "SPECSTAR")
	sink := t.TempDir()
	for _, args := range [][]string{
		{"run", "--until-drained", "--listen", "", "--to", sink},
		{"status"},
		{"stream", "info"},
		{"dlq", "list"},
		{"reconcile", "--from", archive, "--to", sink, "--dry-run"},
		{"restore", "--at-seq", strconv.FormatUint(last, 10), "--to", t.TempDir()},
	} {
		code, out, errs := runCmd(t, append(args, mirror...)...)
		if code != exitOK {
			t.Errorf("replicator %s with a mirror region's flags: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
	}
	// verify compares a source with a sink and connects to no stream.
	if code, out, errs := runCmd(t, "verify", "--from", archive, "--to", sink); code != exitOK {
		t.Errorf("the mirror region's sink differs from what region a published: exit %d\n%s%s", code, out, errs)
	}
	writer := buildWriter(t)
	exp := filepath.Join(t.TempDir(), "b.acbak")
	if out, err := exec.Command(writer, append([]string{"export", "--at-seq", strconv.FormatUint(last, 10), "--to", exp}, mirror...)...).CombinedOutput(); err != nil {
		t.Errorf("writer export --at-seq with a mirror region's flags: %v\n%s", err, out)
	}
}
