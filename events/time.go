package events

import (
	"fmt"
	"strconv"
	"time"
)

// Time is a Python datetime as SpecStar stores it: either an aware instant
// that keeps its UTC offset, or a naive wall-clock time (Naive), which is
// what SpecStar's HTTP routes write by default.
type Time struct {
	time.Time
	// Naive marks a datetime without tzinfo; Time then holds the wall clock
	// in UTC.
	Naive bool
}

// Instant returns the moment in time, reading a naive value as UTC (the
// rule this project uses to order metas).
func (t Time) Instant() time.Time { return t.Time.UTC() }

// Format writes the datetime as msgspec does in JSON and in msgpack strings:
// YYYY-MM-DDTHH:MM:SS, a 6-digit fraction only when microseconds are not
// zero, then "Z" for a zero offset, "+HH:MM" for others, nothing if naive.
func (t Time) Format() string {
	return string(t.appendFormat(make([]byte, 0, 32)))
}

func (t Time) appendFormat(b []byte) []byte {
	b = t.Time.AppendFormat(b, "2006-01-02T15:04:05")
	if us := t.Nanosecond() / 1000; us != 0 {
		b = append(b, '.')
		s := strconv.Itoa(us)
		for i := len(s); i < 6; i++ {
			b = append(b, '0')
		}
		b = append(b, s...)
	}
	if t.Naive {
		return b
	}
	_, off := t.Zone()
	if off == 0 {
		return append(b, 'Z')
	}
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	b = append(b, sign)
	b = append2(b, off/3600)
	b = append(b, ':')
	b = append2(b, off/60%60)
	if s := off % 60; s != 0 {
		b = append(b, ':')
		b = append2(b, s)
	}
	return b
}

func append2(b []byte, v int) []byte {
	return append(b, byte('0'+v/10%10), byte('0'+v%10))
}

// ParseTime parses the ISO 8601 forms that msgspec decodes into a datetime:
// YYYY-MM-DD[T ]HH:MM[:SS[.fraction]] followed by nothing (naive), "Z", or
// an offset ±HH[:MM[:SS]].
func ParseTime(s string) (Time, error) {
	bad := func() (Time, error) { return Time{}, fmt.Errorf("invalid datetime %q", s) }
	num := func(p string) (int, bool) {
		n := 0
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return 0, false
			}
			n = n*10 + int(p[i]-'0')
		}
		return n, len(p) > 0
	}
	if len(s) < 16 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' {
		return bad()
	}
	year, ok1 := num(s[0:4])
	month, ok2 := num(s[5:7])
	day, ok3 := num(s[8:10])
	hour, ok4 := num(s[11:13])
	minute, ok5 := num(s[14:16])
	if !(ok1 && ok2 && ok3 && ok4 && ok5) {
		return bad()
	}
	rest := s[16:]
	sec, nsec := 0, 0
	if len(rest) > 0 && rest[0] == ':' {
		if len(rest) < 3 {
			return bad()
		}
		v, ok := num(rest[1:3])
		if !ok {
			return bad()
		}
		sec, rest = v, rest[3:]
		if len(rest) > 0 && (rest[0] == '.' || rest[0] == ',') {
			i := 1
			for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
				i++
			}
			digits := rest[1:i]
			if len(digits) == 0 || len(digits) > 9 {
				return bad()
			}
			v, _ := num(digits)
			for j := len(digits); j < 9; j++ {
				v *= 10
			}
			nsec, rest = v, rest[i:]
		}
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || sec > 59 || year < 1 {
		return bad()
	}
	var loc *time.Location
	naive := false
	switch {
	case rest == "":
		naive = true
		loc = time.UTC
	case rest == "Z" || rest == "z":
		loc = time.UTC
	case rest[0] == '+' || rest[0] == '-':
		off, ok := parseOffset(rest[1:])
		if !ok {
			return bad()
		}
		if rest[0] == '-' {
			off = -off
		}
		if off == 0 {
			loc = time.UTC
		} else {
			loc = time.FixedZone("", off)
		}
	default:
		return bad()
	}
	return Time{Time: time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc), Naive: naive}, nil
}

// parseOffset parses HH[:MM[:SS]] or HHMM into seconds.
func parseOffset(s string) (int, bool) {
	d := func(p string) (int, bool) {
		if len(p) != 2 || p[0] < '0' || p[0] > '9' || p[1] < '0' || p[1] > '9' {
			return 0, false
		}
		return int(p[0]-'0')*10 + int(p[1]-'0'), true
	}
	var h, m, sec int
	var ok bool
	switch len(s) {
	case 2:
		h, ok = d(s)
	case 4:
		var ok2 bool
		h, ok = d(s[:2])
		m, ok2 = d(s[2:])
		ok = ok && ok2
	case 5, 8:
		if s[2] != ':' || (len(s) == 8 && s[5] != ':') {
			return 0, false
		}
		var ok2, ok3 bool = true, true
		h, ok = d(s[:2])
		m, ok2 = d(s[3:5])
		if len(s) == 8 {
			sec, ok3 = d(s[6:8])
		}
		ok = ok && ok2 && ok3
	default:
		return 0, false
	}
	if !ok || h > 23 || m > 59 || sec > 59 {
		return 0, false
	}
	return h*3600 + m*60 + sec, true
}

func daysIn(year, month int) int {
	return time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
