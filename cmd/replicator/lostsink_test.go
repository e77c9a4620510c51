package main

import (
	"os"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testfixtures"
)

// TestWipedSinkIsRebuilt: a mirror drained, then removed (rm -rf, a
// replaced volume), then run again with the same consumer. Its consumer
// remembers having acknowledged everything; the mirror holds no mark of
// it, so the stream is delivered again and the mirror verifies equal to
// the archive, instead of "0 events applied" and an empty directory.
func TestWipedSinkIsRebuilt(t *testing.T) {
	archive := testfixtures.Path(t, "small.acbak")
	bus := testBus(t)
	replay(t, bus, archive)
	dir := t.TempDir()
	sinkURL := "disk:" + dir + "?name=wiped"
	drain(t, bus, sinkURL)
	if code, out, errs := runCmd(t, "verify", "--from", archive, "--to", dir); code != exitOK {
		t.Fatalf("verify after the first run: %s%s", out, errs)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	out := drain(t, bus, sinkURL)
	if strings.Contains(out, " 0 events applied") {
		t.Errorf("the run after the wipe applied nothing:\n%s", out)
	}
	if code, out, errs := runCmd(t, "verify", "--from", archive, "--to", dir); code != exitOK {
		t.Fatalf("the wiped mirror was not rebuilt: %s%s", out, errs)
	}
	// A third run on the intact mirror trusts the consumer again.
	if out := drain(t, bus, sinkURL); !strings.Contains(out, " 0 events applied") {
		t.Errorf("a run on the intact, marked mirror delivered events again:\n%s", out)
	}
}
