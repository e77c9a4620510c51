package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
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

// TestLogFlagsBeforeTheCommand (issue 34, smaller items): `replicator
// --log-format json` with no command printed its usage as plain text,
// and log flags given before the command were taken for a command. The
// usage comes as JSON lines, and `-v`, `-q` and `--log-format X` before
// the command mean what they mean after it.
func TestLogFlagsBeforeTheCommand(t *testing.T) {
	allJSON := func(what, errs string) {
		t.Helper()
		for _, l := range strings.Split(strings.TrimSpace(errs), "\n") {
			var obj map[string]any
			if err := json.Unmarshal([]byte(l), &obj); err != nil {
				t.Errorf("%s: stderr line %q is no JSON object", what, l)
			}
		}
	}
	code, _, errs := runCmd(t, "--log-format", "json")
	if code != exitError || !strings.Contains(errs, "usage: replicator") {
		t.Errorf("--log-format json alone: exit %d, want the usage (exit 2):\n%s", code, errs)
	}
	allJSON("--log-format json alone", errs)
	code, _, errs = runCmd(t, "--log-format=json", "-v", "status", "--nats", "nats://127.0.0.1:1")
	if code == exitOK || !strings.Contains(errs, "replicator status") {
		t.Errorf("--log-format=json -v status: exit %d, want status's own failure:\n%s", code, errs)
	}
	allJSON("--log-format=json -v status", errs)
}
