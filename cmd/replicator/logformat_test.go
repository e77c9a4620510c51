package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testfixtures"
)

// TestLogFormatJSON (issue 23, item 3): with --log-format json every
// line the logger writes on stderr is one JSON object.
func TestLogFormatJSON(t *testing.T) {
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	code, out, errs := runCmd(t, "run", "-v", "--log-format", "json", "--nats", bus.URL(), "--to", t.TempDir(), "--until-drained")
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("run -v logged nothing")
	}
	for _, l := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(l), &obj); err != nil || obj["msg"] == nil || obj["level"] == nil {
			t.Errorf("stderr line %q is no JSON log object (%v)", l, err)
		}
	}
	// The final error line too (it was plain text among JSON lines).
	code, _, errs = runCmd(t, "status", "--log-format", "json", "--nats", "nats://127.0.0.1:1")
	if code == exitOK {
		t.Fatal("status against a closed port succeeded")
	}
	lines = strings.Split(strings.TrimSpace(errs), "\n")
	for _, l := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(l), &obj); err != nil || obj["msg"] == nil || obj["level"] == nil {
			t.Errorf("stderr line %q of a failed status is no JSON log object (%v)", l, err)
		}
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "replicator status") {
		t.Errorf("the last line %q is not status's error", last)
	}
	if code, _, errs := runCmd(t, "status", "--log-format", "yaml"); code != exitError || !strings.Contains(errs, "log format") {
		t.Errorf("status --log-format yaml: exit %d, want a usage error:\n%s", code, errs)
	}
}
