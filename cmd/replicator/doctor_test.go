package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/specstar/replicator/doctor"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestDoctor: on a drained deployment with one dead letter, doctor exits
// 0 and warns about the dead letter by name; against no server, it exits
// 1 with the failed check and its fix; --from must be Postgres.
func TestDoctor(t *testing.T) {
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	publishRaw(t, bus, "issue", &events.MetaRecord{Data: []byte{0xc1}}, nil)
	mirror := t.TempDir()
	drain(t, bus, mirror+"?name=doctorsink")

	code, out, errs := runCmd(t, "doctor", "--nats", bus.URL(), "--to", mirror+"?name=doctorsink", "--json")
	if code != exitOK {
		t.Fatalf("doctor on a working deployment: exit %d\n%s%s", code, out, errs)
	}
	var got struct {
		Checks []doctor.Result `json:"checks"`
		Failed int             `json:"failed"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	by := map[string][]doctor.Result{}
	for _, c := range got.Checks {
		by[c.Check] = append(by[c.Check], c)
	}
	if c := by["consumer doctorsink"]; len(c) != 1 || c[0].Status != doctor.Warn || !strings.Contains(c[0].Detail, "1 dead letters") || !strings.Contains(c[0].Fix, "dlq") {
		t.Errorf("the consumer with a dead letter: %+v", c)
	}
	for _, name := range []string{"nats", "jetstream", "replicas", "duplicate window", "sink " + mirror + "?name=doctorsink", "disk " + mirror + "?name=doctorsink"} {
		if c := by[name]; len(c) != 1 || c[0].Status != doctor.Pass {
			t.Errorf("check %q: %+v, want one pass", name, c)
		}
	}
	if c := by["fsync"]; len(c) != 1 || c[0].Status != doctor.Warn {
		t.Errorf("fsync of a server reached by URL without --monitor: %+v, want a warning (clients are not told it)", c)
	}

	url := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Take(t))
	code, out, _ = runCmd(t, "doctor", "--nats", url)
	if code != exitDiffer || !strings.Contains(out, "fail  nats") || !strings.Contains(out, "fix: check --nats") || !strings.Contains(out, "1 failed") {
		t.Errorf("doctor with no server at %s: exit %d, want 1 and the failed check with its fix\n%s", url, code, out)
	}

	code, _, errs = runCmd(t, "doctor", "--nats", bus.URL(), "--from", mirror)
	if code != exitError || !strings.Contains(errs, "doctor checks a Postgres source") {
		t.Errorf("doctor --from a directory: exit %d, want 2 saying what it checks\n%s", code, errs)
	}
}
