package replicate

import "testing"

// TestDrainDone: an UntilDrained run ends when the ack floor reaches the
// target, or after two idle readings with an empty fetch between them;
// never on one idle reading, which a consumer created while events
// arrive can report with events still undelivered (a mirror once ended
// with nothing applied).
func TestDrainDone(t *testing.T) {
	for _, c := range []struct {
		name                   string
		done, idle, idleBefore bool
		want                   bool
	}{
		{"floor reached", true, false, false, true},
		{"one idle reading", false, true, false, false},
		{"idle twice", false, true, true, true},
		{"busy after idle", false, false, true, false},
		{"busy", false, false, false, false},
	} {
		if got := drainDone(c.done, c.idle, c.idleBefore); got != c.want {
			t.Errorf("%s: drainDone = %v, want %v", c.name, got, c.want)
		}
	}
}
