package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxDepth bounds nesting in any decoded value, so hostile input cannot
// exhaust the goroutine stack. msgspec has a similar recursion limit.
const maxDepth = 256

// mpReader walks one msgpack value held in memory.
//
// We decode with this cursor instead of vmihailenco's stream Decoder for
// three reasons that matter to a byte-exact, fuzz-safe port: it reports the
// byte offset of every error, it tells which map header width was used (the
// msgspec wide-struct quirk must be reproduced on re-encode), and it can hand
// back the raw bytes of an unknown field without recursing without bound
// (vmihailenco's Skip/DecodeRaw recurse with no depth limit). The type codes
// are vmihailenco's msgpcode constants.
type mpReader struct {
	b     []byte
	off   int
	nodes int // Any values decoded so far (see nodeBudget)
}

// DecodeError is a malformed or mistyped value, with its byte offset inside
// the encoded struct and the field being read.
type DecodeError struct {
	Struct string // the struct being decoded, e.g. "RevisionInfo"
	Field  string // the field being decoded, empty at top level
	Offset int    // byte offset inside the encoded struct
	Msg    string
}

func (e *DecodeError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("decode %s: field %q at byte %d: %s", e.Struct, e.Field, e.Offset, e.Msg)
	}
	return fmt.Sprintf("decode %s at byte %d: %s", e.Struct, e.Offset, e.Msg)
}

func (r *mpReader) errf(format string, args ...any) error {
	return &DecodeError{Offset: r.off, Msg: fmt.Sprintf(format, args...)}
}

func (r *mpReader) eof() bool { return r.off >= len(r.b) }

func (r *mpReader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errf("unexpected end of data")
	}
	return r.b[r.off], nil
}

// take returns the next n bytes without copying.
func (r *mpReader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, r.errf("length %d exceeds the %d bytes that remain", n, len(r.b)-r.off)
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p, nil
}

func (r *mpReader) u8() (uint8, error) {
	p, err := r.take(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

func (r *mpReader) u16() (uint16, error) {
	p, err := r.take(2)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint16(p), nil
}

func (r *mpReader) u32() (uint32, error) {
	p, err := r.take(4)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(p), nil
}

func (r *mpReader) u64() (uint64, error) {
	p, err := r.take(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(p), nil
}

// typeName names a msgpack type code the way msgspec's errors do.
func typeName(c byte) string {
	switch {
	case msgpcode.IsFixedNum(c), c >= msgpcode.Uint8 && c <= msgpcode.Int64:
		return "int"
	case msgpcode.IsFixedMap(c), c == msgpcode.Map16, c == msgpcode.Map32:
		return "object"
	case msgpcode.IsFixedArray(c), c == msgpcode.Array16, c == msgpcode.Array32:
		return "array"
	case msgpcode.IsFixedString(c), c == msgpcode.Str8, c == msgpcode.Str16, c == msgpcode.Str32:
		return "str"
	case c == msgpcode.Bin8, c == msgpcode.Bin16, c == msgpcode.Bin32:
		return "bytes"
	case c == msgpcode.Nil:
		return "null"
	case c == msgpcode.False, c == msgpcode.True:
		return "bool"
	case c == msgpcode.Float, c == msgpcode.Double:
		return "float"
	case c >= msgpcode.FixExt1 && c <= msgpcode.FixExt16, c >= msgpcode.Ext8 && c <= msgpcode.Ext32:
		return "ext"
	}
	return fmt.Sprintf("invalid opcode 0x%02x", c)
}

// mapHeader reads a map header and reports whether it was the 3-byte map16
// form, which msgspec uses for structs with 16 or more declared fields even
// when fewer are written.
func (r *mpReader) mapHeader() (n int, wide bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case msgpcode.IsFixedMap(c):
		r.off++
		return int(c & 0x0f), false, nil
	case c == msgpcode.Map16:
		r.off++
		v, err := r.u16()
		return int(v), true, err
	case c == msgpcode.Map32:
		r.off++
		v, err := r.u32()
		return int(v), false, err
	}
	return 0, false, r.errf("expected object, got %s", typeName(c))
}

func (r *mpReader) arrayHeader() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case msgpcode.IsFixedArray(c):
		r.off++
		return int(c & 0x0f), nil
	case c == msgpcode.Array16:
		r.off++
		v, err := r.u16()
		return int(v), err
	case c == msgpcode.Array32:
		r.off++
		v, err := r.u32()
		return int(v), err
	}
	return 0, r.errf("expected array, got %s", typeName(c))
}

// str reads a msgpack str; bin is refused (msgspec refuses it too).
func (r *mpReader) str() (string, error) {
	p, err := r.strBytes()
	return string(p), err
}

func (r *mpReader) strBytes() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case msgpcode.IsFixedString(c):
		r.off++
		n = int(c & 0x1f)
	case c == msgpcode.Str8:
		r.off++
		v, err := r.u8()
		if err != nil {
			return nil, err
		}
		n = int(v)
	case c == msgpcode.Str16:
		r.off++
		v, err := r.u16()
		if err != nil {
			return nil, err
		}
		n = int(v)
	case c == msgpcode.Str32:
		r.off++
		v, err := r.u32()
		if err != nil {
			return nil, err
		}
		n = int(v)
	default:
		return nil, r.errf("expected str, got %s", typeName(c))
	}
	return r.take(n)
}

// bin reads a msgpack bin and returns a sub-slice of the input (no copy).
func (r *mpReader) bin() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch c {
	case msgpcode.Bin8:
		r.off++
		v, err := r.u8()
		if err != nil {
			return nil, err
		}
		n = int(v)
	case msgpcode.Bin16:
		r.off++
		v, err := r.u16()
		if err != nil {
			return nil, err
		}
		n = int(v)
	case msgpcode.Bin32:
		r.off++
		v, err := r.u32()
		if err != nil {
			return nil, err
		}
		n = int(v)
	default:
		return nil, r.errf("expected bytes, got %s", typeName(c))
	}
	return r.take(n)
}

func (r *mpReader) isNil() bool {
	if r.off < len(r.b) && r.b[r.off] == msgpcode.Nil {
		r.off++
		return true
	}
	return false
}

func (r *mpReader) boolean() (bool, error) {
	c, err := r.peek()
	if err != nil {
		return false, err
	}
	switch c {
	case msgpcode.True:
		r.off++
		return true, nil
	case msgpcode.False:
		r.off++
		return false, nil
	}
	return false, r.errf("expected bool, got %s", typeName(c))
}

// integer reads any msgpack int. It returns the value as int64 when it fits
// and as uint64 (big == true) otherwise.
func (r *mpReader) integer() (i int64, u uint64, big bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, 0, false, err
	}
	if msgpcode.IsFixedNum(c) {
		r.off++
		return int64(int8(c)), 0, false, nil
	}
	r.off++
	switch c {
	case msgpcode.Uint8:
		v, err := r.u8()
		return int64(v), 0, false, err
	case msgpcode.Uint16:
		v, err := r.u16()
		return int64(v), 0, false, err
	case msgpcode.Uint32:
		v, err := r.u32()
		return int64(v), 0, false, err
	case msgpcode.Uint64:
		v, err := r.u64()
		if v > math.MaxInt64 {
			return 0, v, true, err
		}
		return int64(v), 0, false, err
	case msgpcode.Int8:
		v, err := r.u8()
		return int64(int8(v)), 0, false, err
	case msgpcode.Int16:
		v, err := r.u16()
		return int64(int16(v)), 0, false, err
	case msgpcode.Int32:
		v, err := r.u32()
		return int64(int32(v)), 0, false, err
	case msgpcode.Int64:
		v, err := r.u64()
		return int64(v), 0, false, err
	}
	r.off--
	return 0, 0, false, r.errf("expected int, got %s", typeName(c))
}

// int64 reads an int that must fit in int64.
func (r *mpReader) int64() (int64, error) {
	start := r.off
	i, _, big, err := r.integer()
	if err != nil {
		return 0, err
	}
	if big {
		r.off = start
		return 0, r.errf("integer out of range for int64")
	}
	return i, nil
}

func (r *mpReader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case msgpcode.Double:
		r.off++
		v, err := r.u64()
		return math.Float64frombits(v), err
	case msgpcode.Float:
		r.off++
		v, err := r.u32()
		return float64(math.Float32frombits(v)), err
	}
	return 0, r.errf("expected float, got %s", typeName(c))
}

// ext reads an extension header and body.
func (r *mpReader) ext() (typ int8, data []byte, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, nil, err
	}
	r.off++
	var n int
	switch c {
	case msgpcode.FixExt1:
		n = 1
	case msgpcode.FixExt2:
		n = 2
	case msgpcode.FixExt4:
		n = 4
	case msgpcode.FixExt8:
		n = 8
	case msgpcode.FixExt16:
		n = 16
	case msgpcode.Ext8:
		v, e := r.u8()
		n, err = int(v), e
	case msgpcode.Ext16:
		v, e := r.u16()
		n, err = int(v), e
	case msgpcode.Ext32:
		v, e := r.u32()
		n, err = int(v), e
	default:
		r.off--
		return 0, nil, r.errf("expected ext, got %s", typeName(c))
	}
	if err != nil {
		return 0, nil, err
	}
	t, err := r.u8()
	if err != nil {
		return 0, nil, err
	}
	data, err = r.take(n)
	return int8(t), data, err
}

// Python's datetime holds the years 1 to 9999; msgspec refuses a
// timestamp outside them, so SpecStar could not read such a record back.
const (
	minPythonUnix = -62135596800 // 0001-01-01T00:00:00Z
	maxPythonUnix = 253402300799 // 9999-12-31T23:59:59Z
)

// errTimestampRange names why a well-formed timestamp is refused.
var errTimestampRange = errors.New("msgpack timestamp outside Python's datetime range (years 1 to 9999)")

// timestampExt decodes the body of a msgpack Timestamp extension (type
// -1): an error for a malformed body or an instant Python cannot hold.
func timestampExt(data []byte) (time.Time, error) {
	var sec, nsec int64
	switch len(data) {
	case 4:
		sec = int64(binary.BigEndian.Uint32(data))
	case 8:
		v := binary.BigEndian.Uint64(data)
		nsec, sec = int64(v>>34), int64(v&(1<<34-1))
	case 12:
		nsec, sec = int64(binary.BigEndian.Uint32(data)), int64(binary.BigEndian.Uint64(data[4:]))
	default:
		return time.Time{}, errors.New("invalid msgpack timestamp")
	}
	if nsec > 999999999 {
		return time.Time{}, errors.New("invalid msgpack timestamp")
	}
	if sec < minPythonUnix || sec > maxPythonUnix {
		return time.Time{}, errTimestampRange
	}
	return time.Unix(sec, nsec).UTC(), nil
}

// datetime reads a datetime field: the Timestamp extension in any width, or
// an ISO 8601 string with or without an offset (naive datetimes are strings).
func (r *mpReader) datetime() (Time, error) {
	c, err := r.peek()
	if err != nil {
		return Time{}, err
	}
	start := r.off
	if msgpcode.IsString(c) {
		s, err := r.str()
		if err != nil {
			return Time{}, err
		}
		t, err := ParseTime(s)
		if err != nil {
			r.off = start
			return Time{}, r.errf("%v", err)
		}
		return t, nil
	}
	typ, data, err := r.ext()
	if err != nil {
		r.off = start
		return Time{}, r.errf("expected datetime, got %s", typeName(c))
	}
	if typ != -1 {
		r.off = start
		return Time{}, r.errf("expected datetime, got ext type %d", typ)
	}
	t, err := timestampExt(data)
	if err != nil {
		r.off = start
		return Time{}, r.errf("%v", err)
	}
	return Time{Time: t}, nil
}

// skip advances past one value of any type and returns its raw bytes.
func (r *mpReader) skip() ([]byte, error) {
	start := r.off
	// pending counts the values still to skip at each open container; an
	// explicit stack keeps hostile nesting from recursing.
	pending := 1
	depth := 0
	stack := make([]int, 0, 8)
	for pending > 0 || len(stack) > 0 {
		if pending == 0 {
			pending = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			depth--
			continue
		}
		pending--
		c, err := r.peek()
		if err != nil {
			return nil, err
		}
		var children int
		switch {
		case msgpcode.IsFixedMap(c), c == msgpcode.Map16, c == msgpcode.Map32:
			n, _, err := r.mapHeader()
			if err != nil {
				return nil, err
			}
			children = 2 * n
		case msgpcode.IsFixedArray(c), c == msgpcode.Array16, c == msgpcode.Array32:
			n, err := r.arrayHeader()
			if err != nil {
				return nil, err
			}
			children = n
		default:
			if err := r.skipScalar(c); err != nil {
				return nil, err
			}
			continue
		}
		if children > len(r.b)-r.off {
			return nil, r.errf("container of %d items exceeds the %d bytes that remain", children, len(r.b)-r.off)
		}
		if children > 0 {
			depth++
			if depth > maxDepth {
				return nil, r.errf("nesting deeper than %d", maxDepth)
			}
			stack = append(stack, pending)
			pending = children
		}
	}
	return r.b[start:r.off], nil
}

func (r *mpReader) skipScalar(c byte) error {
	switch {
	case msgpcode.IsFixedNum(c), c == msgpcode.Nil, c == msgpcode.True, c == msgpcode.False:
		r.off++
		return nil
	case c >= msgpcode.Uint8 && c <= msgpcode.Int64:
		_, _, _, err := r.integer()
		return err
	case c == msgpcode.Float, c == msgpcode.Double:
		_, err := r.float()
		return err
	case msgpcode.IsString(c):
		_, err := r.strBytes()
		return err
	case c == msgpcode.Bin8, c == msgpcode.Bin16, c == msgpcode.Bin32:
		_, err := r.bin()
		return err
	case c >= msgpcode.FixExt1 && c <= msgpcode.FixExt16, c >= msgpcode.Ext8 && c <= msgpcode.Ext32:
		_, _, err := r.ext()
		return err
	}
	return r.errf("invalid opcode 0x%02x", c)
}
