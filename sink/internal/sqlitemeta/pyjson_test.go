package sqlitemeta

import (
	"math"
	"strconv"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
)

// TestPyJSON: json.dumps(v, ensure_ascii=False) as CPython 3.12 prints it
// (expected texts produced by CPython).
func TestPyJSON(t *testing.T) {
	floats := []struct {
		f    float64
		want string
	}{
		{1.0, "1.0"}, {100.0, "100.0"}, {1e15, "1000000000000000.0"}, {1e16, "1e+16"},
		{1e-4, "0.0001"}, {1e-5, "1e-05"}, {1.5e-5, "1.5e-05"}, {0.1, "0.1"},
		{math.Copysign(0, -1), "-0.0"}, {0, "0.0"}, {1234567890123456.8, "1234567890123456.8"},
		{9007199254740992.0, "9007199254740992.0"}, {1.2345678901234568e16, "1.2345678901234568e+16"},
		{5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"}, {123.456, "123.456"},
		{-2.5e-8, "-2.5e-08"}, {1e22, "1e+22"}, {0.0001234, "0.0001234"},
		{math.NaN(), "NaN"}, {math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"},
	}
	for _, c := range floats {
		if got, err := AppendPyJSON(nil, c.f, 0); err != nil || string(got) != c.want {
			t.Errorf("%v: %q %v, want %q", c.f, got, err, c.want)
		}
	}
	m := events.Map{
		{Key: "b", Value: []any{int64(1), "x", nil, true, false, events.Map{}}},
		{Key: "a", Value: events.Map{{Key: "é", Value: "日本\n\t\"\\\x00\x1f\x7f\u2028/<>"}}},
		{Key: "c", Value: []any{}},
		{Key: "big", Value: events.BigInt("18446744073709551616")},
		{Key: "u", Value: uint64(math.MaxUint64)},
		{Key: "neg", Value: int64(math.MinInt64)},
	}
	want := "{\"b\": [1, \"x\", null, true, false, {}], \"a\": {\"é\": \"日本\\n\\t\\\"\\\\\\u0000\\u001f\x7f\u2028/<>\"}, \"c\": [], " +
		"\"big\": 18446744073709551616, \"u\": 18446744073709551615, \"neg\": -9223372036854775808}"
	if got, err := AppendPyJSON(nil, m, 0); err != nil || string(got) != want {
		t.Errorf("map:\n got %q %v\nwant %q", got, err, want)
	}
	keys := events.Map{{Key: int64(1), Value: int64(1)}, {Key: 1.5, Value: int64(2)}, {Key: nil, Value: int64(3)}, {Key: false, Value: int64(4)}}
	if got, err := AppendPyJSON(nil, keys, 0); err != nil || string(got) != `{"1": 1, "1.5": 2, "null": 3, "false": 4}` {
		t.Errorf("keys: %q %v", got, err)
	}
	// What json.dumps refuses (SpecStar's SqliteMetaStore cannot store it
	// either).
	for _, v := range []any{sinktestutil.MustTime(t, "2024-01-01T00:00:00Z"), []byte("x"), events.Ext{Type: 1}, events.Struct{},
		events.Map{{Key: []any{}, Value: int64(1)}}} {
		if _, err := AppendPyJSON(nil, events.Map{{Key: "k", Value: v}}, 0); err == nil {
			t.Errorf("%T accepted", v)
		}
	}
}

// TestPyTimestamp: datetime.timestamp() as CPython computes it (naive
// values read as UTC).
func TestPyTimestamp(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"2024-09-09T09:09:28.843981Z", "1725872968.843981"},
		{"2024-09-10T01:02:03.456789", "1725930123.456789"},
		{"9999-12-31T23:59:59.999999Z", "253402300800.0"},
		{"9999-12-31T23:59:59.999999", "253402300800.0"},
		{"0001-01-01T00:00:00.000001Z", "-62135596800.0"},
		{"1969-12-31T23:59:59.500000Z", "-0.5"},
		{"2024-01-02T11:04:05.123456+08:00", "1704164645.123456"},
		{"1901-01-01T00:00:00.000007", "-2177452799.999993"},
	} {
		want, _ := strconv.ParseFloat(c.want, 64)
		if got := PyTimestamp(sinktestutil.MustTime(t, c.in)); got != want {
			t.Errorf("%s: %v, want %v", c.in, got, want)
		}
	}
}
