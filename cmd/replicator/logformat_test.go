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
	if code, _, errs := runCmd(t, "status", "--log-format", "yaml"); code != exitError || !strings.Contains(errs, "log format") {
		t.Errorf("status --log-format yaml: exit %d, want a usage error:\n%s", code, errs)
	}
}
