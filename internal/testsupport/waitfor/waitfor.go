// Package waitfor lets tests wait for a condition with a deadline derived
// from their own progress, not a fixed one: a wait fails only when the
// condition stays false and nothing moved for a stall window, which
// itself grows with the machine's load, so a test that passes at a load
// average of 1 passes at 10.
package waitfor

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// DefaultStall is the stall window (at a load of one per core) of Until
// when the caller gives none.
const DefaultStall = 30 * time.Second

// poll is how often a condition is checked.
const poll = 20 * time.Millisecond

// Options tune Until.
type Options struct {
	// Stall is how long the condition may stay false with no progress,
	// at a load average of one per core (0: DefaultStall); Scaled
	// stretches it with the load.
	Stall time.Duration
	// Progress (may be nil) reports how far the work waited on is (a
	// count of records, an LSN, a string); every change restarts the
	// stall window. Without it the window runs from the start.
	Progress func() any
}

// Until polls cond until it holds and fails t (Fatalf, naming what) when
// it stays false for the stall window with no change of o.Progress.
func Until(t testing.TB, what string, o Options, cond func() bool) {
	t.Helper()
	if err := until(what, o, cond, time.Now); err != "" {
		t.Fatal(err)
	}
}

// For is Until with the default stall window and no progress measure.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Until(t, what, Options{}, cond)
}

// until is Until returning the failure ("" when cond held).
func until(what string, o Options, cond func() bool, now func() time.Time) string {
	stall := o.Stall
	if stall <= 0 {
		stall = DefaultStall
	}
	start := now()
	last := start
	var mark any
	if o.Progress != nil {
		mark = o.Progress()
	}
	for !cond() {
		if o.Progress != nil {
			if p := o.Progress(); p != mark {
				mark, last = p, now()
			}
		}
		if idle := now().Sub(last); idle > Scaled(stall) {
			return "timed out waiting for " + what + ": no progress for " + idle.Round(time.Millisecond).String() +
				" (waited " + now().Sub(start).Round(time.Millisecond).String() + ", load average " + loadString() + ")"
		}
		time.Sleep(poll)
	}
	return ""
}

// Scaled is d stretched by the machine's load: d times the one-minute
// load average per core, never less than d (the load read from
// /proc/loadavg; d itself where it cannot be read).
func Scaled(d time.Duration) time.Duration {
	f := load() / float64(runtime.NumCPU())
	if f <= 1 {
		return d
	}
	return time.Duration(float64(d) * f)
}

// After is time.After(Scaled(d)): a channel deadline that grows with the
// load, for a test that waits on a channel.
func After(d time.Duration) <-chan time.Time { return time.After(Scaled(d)) }

// load is the one-minute load average, 0 when unknown.
func load() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return 0
	}
	return v
}

func loadString() string {
	return strconv.FormatFloat(load(), 'f', 2, 64) + " on " + strconv.Itoa(runtime.NumCPU()) + " cores"
}
