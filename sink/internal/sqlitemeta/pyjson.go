package sqlitemeta

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/specstar/replicator/events"
)

// PyTimestamp is Python's datetime.timestamp() for a SpecStar datetime, the
// REAL stored in the time columns. An aware value is
// timedelta.total_seconds() of its distance to the epoch: the exact
// microsecond count divided by 10**6, correctly rounded. A naive value is
// read as UTC (SpecStar runs with TZ=UTC here) and computed as CPython
// does for naive values: whole seconds plus microsecond / 1e6, in floats.
func PyTimestamp(t events.Time) float64 {
	in := t.Instant()
	sec := in.Unix()
	us := int64(in.Nanosecond() / 1000)
	if t.Naive {
		return float64(sec) + float64(float64(us)/1e6)
	}
	total := new(big.Int).Mul(big.NewInt(sec), big.NewInt(1_000_000))
	total.Add(total, big.NewInt(us))
	f, _ := new(big.Rat).SetFrac(total, big.NewInt(1_000_000)).Float64()
	return f
}

// maxPyJSONDepth bounds nesting (the values come from a bounded decoder
// already; this only guards hand-built ones).
const maxPyJSONDepth = 1000

// AppendPyJSON writes v as Python's json.dumps(v, ensure_ascii=False) does:
// separators ", " and ": ", keys in the map's own order, floats as repr()
// (NaN and Infinity as such), non-ASCII raw. Values json.dumps cannot
// serialize (datetimes, bytes, extensions, structs) are an error, as they
// are for SpecStar's SqliteMetaStore.
func AppendPyJSON(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxPyJSONDepth {
		return nil, errors.New("nesting too deep")
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if x {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case events.BigInt:
		return append(b, x...), nil
	case float64:
		return appendPyFloat(b, x), nil
	case string:
		return appendPyString(b, x), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			var err error
			if b, err = AppendPyJSON(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case events.Map:
		b = append(b, '{')
		for i, it := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			var err error
			if b, err = appendPyKey(b, it.Key); err != nil {
				return nil, err
			}
			b = append(b, ": "...)
			if b, err = AppendPyJSON(b, it.Value, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, fmt.Errorf("Object of type %s is not JSON serializable", pyTypeName(v))
}

// appendPyKey writes a dict key as json.dumps converts it: strings as they
// are, None/bool/int/float as their JSON text in quotes.
func appendPyKey(b []byte, k any) ([]byte, error) {
	switch x := k.(type) {
	case string:
		return appendPyString(b, x), nil
	case nil, bool, int64, uint64, events.BigInt, float64:
		text, _ := AppendPyJSON(nil, x, 0)
		return appendPyString(b, string(text)), nil
	}
	return nil, fmt.Errorf("keys must be str, int, float, bool or None, not %s", pyTypeName(k))
}

func pyTypeName(v any) string {
	switch v.(type) {
	case events.Time:
		return "datetime"
	case []byte:
		return "bytes"
	case events.Ext:
		return "Ext"
	case events.Struct:
		return "Struct"
	}
	return fmt.Sprintf("%T", v)
}

// appendPyFloat is float.__repr__: the shortest round-trip digits, fixed
// notation when the decimal exponent is in [-4, 16), scientific otherwise
// (at least two exponent digits, always signed), ".0" added to integral
// fixed values.
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	if f != 0 {
		// The decimal exponent of the shortest digits decides the notation.
		e := strconv.FormatFloat(f, 'e', -1, 64)
		exp, _ := strconv.Atoi(e[strings.LastIndexByte(e, 'e')+1:])
		if exp < -4 || exp >= 16 {
			return append(b, e...)
		}
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'f', -1, 64)
	if !strings.ContainsRune(string(b[start:]), '.') {
		b = append(b, ".0"...)
	}
	return b
}

// appendPyString is json.dumps' string form with ensure_ascii=False: only
// '"', '\\' and C0 controls are escaped (\n \r \t \b \f by name, others as
// \u00xx in lowercase hex); everything else is written raw.
func appendPyString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf || c >= 0x20 && c != '"' && c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
	}
	return append(b, '"')
}
