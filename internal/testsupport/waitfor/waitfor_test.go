package waitfor

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock advances by step each time it is read.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Unix(0, 0)
	return func() time.Time { t = t.Add(step); return t }
}

// TestUntilProgressRestartsTheWindow: a condition that takes far longer
// than the stall window is waited for while progress is made.
func TestUntilProgressRestartsTheWindow(t *testing.T) {
	var n int
	err := until("n to reach 50", Options{Stall: 5 * time.Second, Progress: func() any { return n }},
		func() bool { n++; return n >= 50 }, fakeClock(time.Second))
	if err != "" {
		t.Fatal(err)
	}
}

// TestUntilFailsWithoutProgress: no progress for the window fails,
// naming what was waited for.
func TestUntilFailsWithoutProgress(t *testing.T) {
	calls := 0
	err := until("nothing", Options{Stall: 50 * time.Millisecond, Progress: func() any { return 0 }},
		func() bool { calls++; return calls > 1000 }, fakeClock(10*time.Millisecond))
	if !strings.Contains(err, "timed out waiting for nothing: no progress") {
		t.Fatalf("got %q", err)
	}
}

// TestForReturnsWhenTheConditionHolds runs For against a real clock.
func TestForReturnsWhenTheConditionHolds(t *testing.T) {
	var done atomic.Bool
	time.AfterFunc(50*time.Millisecond, func() { done.Store(true) })
	For(t, "the timer", done.Load)
}

// TestScaledNeverShrinks: Scaled never returns less than it is given.
func TestScaledNeverShrinks(t *testing.T) {
	if d := Scaled(time.Second); d < time.Second {
		t.Fatalf("Scaled(1s) = %s", d)
	}
}
