package events

import (
	"encoding/base64"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The JSON side is hand-written rather than built on encoding/json: msgspec
// escapes fewer characters than Go (it leaves <, >, & and U+2028 raw), writes
// floats in its own layout, and we need the exact byte span of each unknown
// field to re-encode it unchanged.

// appendJSONString writes s as msgspec does: only '"', '\\' and C0 controls
// are escaped (\n \r \t \b \f short, the rest as \u00xx); all else is raw.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
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
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendJSONBytes(b []byte, p []byte) []byte {
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, '"')
}

// jsReader walks one JSON document held in memory.
type jsReader struct {
	b     []byte
	off   int
	nodes int // Any values decoded so far (see nodeBudget)
}

func (r *jsReader) errf(format string, args ...any) error {
	return (&mpReader{off: r.off}).errf(format, args...)
}

func (r *jsReader) ws() {
	for r.off < len(r.b) {
		switch r.b[r.off] {
		case ' ', '\t', '\n', '\r':
			r.off++
		default:
			return
		}
	}
}

func (r *jsReader) peek() (byte, error) {
	r.ws()
	if r.off >= len(r.b) {
		return 0, r.errf("unexpected end of data")
	}
	return r.b[r.off], nil
}

func (r *jsReader) expect(c byte) error {
	got, err := r.peek()
	if err != nil {
		return err
	}
	if got != c {
		return r.errf("expected %q, got %q", c, got)
	}
	r.off++
	return nil
}

// end checks that only whitespace follows the document.
func (r *jsReader) end() error {
	r.ws()
	if r.off != len(r.b) {
		return r.errf("trailing characters after JSON value")
	}
	return nil
}

// objectStart consumes '{' and reports a type error otherwise.
func (r *jsReader) objectStart() error {
	c, err := r.peek()
	if err != nil {
		return err
	}
	if c != '{' {
		return r.errf("expected object, got %s", jsonTypeName(c))
	}
	r.off++
	return nil
}

// nextKey advances to the next member of an object: it returns false at
// '}', otherwise the key, with the ':' consumed.
func (r *jsReader) nextKey(first bool) (string, bool, error) {
	c, err := r.peek()
	if err != nil {
		return "", false, err
	}
	if c == '}' {
		r.off++
		return "", false, nil
	}
	if !first {
		if c != ',' {
			return "", false, r.errf("expected ',' or '}', got %q", c)
		}
		r.off++
	}
	k, err := r.str()
	if err != nil {
		return "", false, err
	}
	if err := r.expect(':'); err != nil {
		return "", false, err
	}
	return k, true, nil
}

func jsonTypeName(c byte) string {
	switch {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "str"
	case c == 'n':
		return "null"
	case c == 't' || c == 'f':
		return "bool"
	case c == '-' || (c >= '0' && c <= '9'):
		return "number"
	}
	return "invalid character " + strconv.QuoteRune(rune(c))
}

func (r *jsReader) literal(word string) bool {
	r.ws()
	if len(r.b)-r.off >= len(word) && string(r.b[r.off:r.off+len(word)]) == word {
		r.off += len(word)
		return true
	}
	return false
}

func (r *jsReader) isNull() bool {
	c, err := r.peek()
	if err != nil || c != 'n' {
		return false
	}
	return r.literal("null")
}

func (r *jsReader) boolean() (bool, error) {
	if r.literal("true") {
		return true, nil
	}
	if r.literal("false") {
		return false, nil
	}
	c, err := r.peek()
	if err != nil {
		return false, err
	}
	return false, r.errf("expected bool, got %s", jsonTypeName(c))
}

// str reads a JSON string, decoding escapes. Invalid UTF-8 is refused.
func (r *jsReader) str() (string, error) {
	c, err := r.peek()
	if err != nil {
		return "", err
	}
	if c != '"' {
		return "", r.errf("expected str, got %s", jsonTypeName(c))
	}
	r.off++
	start := r.off
	// Fast path: no escapes.
	for i := r.off; i < len(r.b); i++ {
		switch c := r.b[i]; {
		case c == '"':
			s := r.b[start:i]
			if !utf8.Valid(s) {
				return "", r.errf("invalid utf-8 in string")
			}
			r.off = i + 1
			return string(s), nil
		case c == '\\':
			return r.strSlow(start)
		case c < 0x20:
			r.off = i
			return "", r.errf("control character in string")
		}
	}
	return "", r.errf("unterminated string")
}

func (r *jsReader) strSlow(start int) (string, error) {
	out := make([]byte, 0, 32)
	i := start
	for i < len(r.b) {
		c := r.b[i]
		switch {
		case c == '"':
			if !utf8.Valid(out) {
				return "", r.errf("invalid utf-8 in string")
			}
			r.off = i + 1
			return string(out), nil
		case c < 0x20:
			r.off = i
			return "", r.errf("control character in string")
		case c != '\\':
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(r.b) {
			break
		}
		e := r.b[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			cp, ok := hex4(r.b, i)
			if !ok {
				r.off = i
				return "", r.errf("invalid \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(rune(cp)) {
				lo, ok := -1, false
				if i+6 <= len(r.b) && r.b[i] == '\\' && r.b[i+1] == 'u' {
					lo, ok = hex4(r.b, i+2)
				}
				dec := utf16.DecodeRune(rune(cp), rune(lo))
				if !ok || dec == utf8.RuneError {
					r.off = i
					return "", r.errf("invalid surrogate pair in \\u escape")
				}
				i += 6
				out = utf8.AppendRune(out, dec)
				continue
			}
			out = utf8.AppendRune(out, rune(cp))
		default:
			r.off = i - 1
			return "", r.errf("invalid escape character %q", e)
		}
	}
	r.off = len(r.b)
	return "", r.errf("unterminated string")
}

func hex4(b []byte, i int) (int, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	v := 0
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// number reads a JSON number token and reports whether it is an integer.
func (r *jsReader) number() (text string, isInt bool, err error) {
	c, err := r.peek()
	if err != nil {
		return "", false, err
	}
	start := r.off
	i := r.off
	if c == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(r.b) && r.b[i] >= '0' && r.b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	intStart := i
	if n := digits(); n == 0 || (n > 1 && r.b[intStart] == '0') {
		return "", false, r.errf("expected number, got %s", jsonTypeName(c))
	}
	isInt = true
	if i < len(r.b) && r.b[i] == '.' {
		i++
		isInt = false
		if digits() == 0 {
			r.off = i
			return "", false, r.errf("invalid number")
		}
	}
	if i < len(r.b) && (r.b[i] == 'e' || r.b[i] == 'E') {
		i++
		isInt = false
		if i < len(r.b) && (r.b[i] == '+' || r.b[i] == '-') {
			i++
		}
		if digits() == 0 {
			r.off = i
			return "", false, r.errf("invalid number")
		}
	}
	r.off = i
	return string(r.b[start:i]), isInt, nil
}

// int64 reads an integer that fits in int64.
func (r *jsReader) int64() (int64, error) {
	start := r.off
	text, isInt, err := r.number()
	if err != nil {
		return 0, err
	}
	v, perr := strconv.ParseInt(text, 10, 64)
	if !isInt || perr != nil {
		r.off = start
		r.ws()
		return 0, r.errf("expected int, got %s", text)
	}
	return v, nil
}

// bytes reads base64 (standard alphabet, padded) as msgspec writes bytes.
func (r *jsReader) bytes() ([]byte, error) {
	start := r.off
	s, err := r.str()
	if err != nil {
		return nil, err
	}
	p, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		r.off = start
		r.ws()
		return nil, r.errf("invalid base64 bytes")
	}
	return p, nil
}

func (r *jsReader) datetime() (Time, error) {
	start := r.off
	s, err := r.str()
	if err != nil {
		return Time{}, err
	}
	t, err := ParseTime(s)
	if err != nil {
		r.off = start
		r.ws()
		return Time{}, r.errf("%v", err)
	}
	return t, nil
}

// skip advances past one value and returns its raw bytes.
func (r *jsReader) skip() ([]byte, error) {
	r.ws()
	start := r.off
	if _, err := r.value(0); err != nil {
		return nil, err
	}
	return r.b[start:r.off], nil
}
