package replicate

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestParseTime: --at takes an RFC 3339 time (with or without fractional
// seconds, any offset) or a positive duration meaning that long ago;
// anything else is refused naming both forms.
func TestParseTime(t *testing.T) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "2026-12-02T15:04:05Z", want: time.Date(2026, 12, 2, 15, 4, 5, 0, time.UTC)},
		{in: "2026-12-02T15:04:05.123456789Z", want: time.Date(2026, 12, 2, 15, 4, 5, 123456789, time.UTC)},
		{in: "2026-12-02T16:04:05+01:00", want: time.Date(2026, 12, 2, 15, 4, 5, 0, time.UTC)},
		{in: "2h", want: now.Add(-2 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "1h30m15s", want: now.Add(-(time.Hour + 30*time.Minute + 15*time.Second))},
		{in: "0s", bad: true},
		{in: "-2h", bad: true},
		{in: "yesterday", bad: true},
		{in: "2026-12-02", bad: true},
		{in: "", bad: true},
	} {
		got, err := ParseTime(c.in, now)
		switch {
		case c.bad && (err == nil || !strings.Contains(err.Error(), "RFC 3339") || !strings.Contains(err.Error(), "duration")):
			t.Errorf("ParseTime(%q) = %v, %v; want an error naming both forms", c.in, got, err)
		case !c.bad && (err != nil || !got.Equal(c.want)):
			t.Errorf("ParseTime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// FuzzParseTime: no input panics the parser; an accepted one is a time
// in RFC 3339 or at most now (a duration ago), and an error quotes it.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-12-02T15:04:05Z", "2026-12-02T15:04:05.5+02:00", "2h", "1h30m", "0s", "-1h", "9999999h", "x"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseTime(in, now)
		if err != nil {
			if !strings.Contains(err.Error(), "--at") {
				t.Fatalf("error does not name the flag: %v", err)
			}
			return
		}
		if _, perr := time.Parse(time.RFC3339Nano, in); perr != nil && !got.Before(now) {
			t.Fatalf("ParseTime(%q) = %v: a duration ago must be before now", in, got)
		}
	})
}

// TestRestorableSummary: stream info's line says from when a restore is
// possible and whether, and by what, events were dropped before it.
func TestRestorableSummary(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	info := func(first, last uint64, msgs uint64, deleted int, maxAge time.Duration, ret jetstream.RetentionPolicy) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{
			Config: jetstream.StreamConfig{Name: "SPECSTAR", MaxAge: maxAge, MaxBytes: -1, Retention: ret},
			State:  jetstream.StreamState{FirstSeq: first, LastSeq: last, Msgs: msgs, FirstTime: t0, LastTime: t0.Add(time.Hour), NumDeleted: deleted},
		}
	}
	for _, c := range []struct {
		info     *jetstream.StreamInfo
		complete bool
		want     []string
	}{
		{info(1, 10, 10, 0, 0, jetstream.LimitsPolicy), true, []string{"2026-12-02T15:00:00Z (sequence 1); nothing was dropped"}},
		{info(5, 10, 6, 0, 2*time.Hour, jetstream.LimitsPolicy), false, []string{"(sequence 5); sequences 1..4 were removed by retention (max-age 2h0m0s) or a purge of the stream"}},
		{info(5, 10, 6, 0, 0, jetstream.LimitsPolicy), false, []string{"sequences 1..4 were removed by a purge of the stream"}},
		{info(1, 10, 9, 1, 0, jetstream.LimitsPolicy), false, []string{"nothing was dropped; 1 events were deleted from between"}},
		{info(11, 10, 0, 0, time.Hour, jetstream.LimitsPolicy), false, []string{"nothing: the stream holds no events (sequences 1..10 were removed"}},
		{info(0, 0, 0, 0, 0, jetstream.LimitsPolicy), true, []string{"nothing: the stream holds no events yet"}},
		{info(3, 10, 8, 0, 0, jetstream.InterestPolicy), false, []string{"removed by retention (interest retention)"}},
	} {
		r := RestorableOf(c.info)
		got := r.Summary()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("state %+v: summary %q, want it to say %q", c.info.State, got, w)
			}
		}
		if r.Complete() != c.complete {
			t.Errorf("state %+v: complete %v, want %v", c.info.State, r.Complete(), c.complete)
		}
	}
}
