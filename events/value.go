package events

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// A Value is what msgspec decodes an Any-typed field into. It is one of:
// nil, bool, int64, uint64 (only above MaxInt64), BigInt, float64, string,
// []byte, Time, Ext, []any, Map or Struct.
type Value = any

// Map is a Python dict. Encoders write its keys sorted (deterministic mode);
// decoders keep the order they read.
type Map []MapItem

// MapItem is one key/value pair of a Map.
type MapItem struct {
	Key   Value
	Value Value
}

// Get returns the value under a string key.
func (m Map) Get(key string) (Value, bool) {
	for _, it := range m {
		if k, ok := it.Key.(string); ok && k == key {
			return it.Value, true
		}
	}
	return nil, false
}

// Struct is a user msgspec.Struct: fields in declaration order, never
// sorted. Declared is the number of fields the Struct type declares (plus
// one if tagged); msgspec sizes the msgpack map header from it, so a struct
// declaring 16 or more fields gets a map16 header even with fewer written.
type Struct struct {
	Fields   []StructField
	Declared int
}

// StructField is one written field of a Struct.
type StructField struct {
	Name  string
	Value Value
}

// BigInt is a JSON integer outside [-2^63, 2^64-1], kept as its decimal
// text. msgpack cannot carry it (msgspec raises OverflowError too).
type BigInt string

// Ext is a msgpack extension other than the Timestamp.
type Ext struct {
	Type int8
	Data []byte
}

// ErrIntOverflow is msgspec's "can't serialize ints < -2**63 or > 2**64 - 1".
var ErrIntOverflow = errors.New("can't serialize ints < -2**63 or > 2**64 - 1 in msgpack")

// nodeBudget is how many Any values (dict, list and scalar nodes) one
// record of n bytes may decode into. A decoded node takes 16 to 40 bytes
// besides its own bytes while its encoding can take one, so a list of N
// one-byte items made a 64 MiB frame take 3 GB, and at one node per 4
// bytes a 250 MiB frame of 3-byte strings still took 3 GB in writer
// verify. At one node per 32 bytes (beyond a fixed 262,144, far more than
// legitimate records hold: indexed_data holds a few index fields) a
// record's tree stays within about twice its bytes.
func nodeBudget(n int) int { return 1<<18 + n/32 }

// value decodes one msgpack value as msgspec decodes into Any.
func (r *mpReader) value(depth int) (Value, error) {
	if depth > maxDepth {
		return nil, r.errf("nesting deeper than %d", maxDepth)
	}
	if r.nodes++; r.nodes > nodeBudget(len(r.b)) {
		return nil, r.errf("more than %d values in %d bytes: refused, as decoding them would take far more memory than the record", nodeBudget(len(r.b)), len(r.b))
	}
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	switch {
	case c == msgpcode.Nil:
		r.off++
		return nil, nil
	case c == msgpcode.True || c == msgpcode.False:
		return r.boolean()
	case msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64):
		i, u, big, err := r.integer()
		if big {
			return u, err
		}
		return i, err
	case c == msgpcode.Float || c == msgpcode.Double:
		return r.float()
	case msgpcode.IsString(c):
		return r.str()
	case msgpcode.IsBin(c):
		p, err := r.bin()
		return bytes.Clone(p), err
	case msgpcode.IsExt(c):
		start := r.off
		typ, data, err := r.ext()
		if err != nil {
			return nil, err
		}
		if typ == -1 {
			t, err := timestampExt(data)
			if err != nil {
				r.off = start
				return nil, r.errf("%v", err)
			}
			return Time{Time: t}, nil
		}
		return Ext{Type: typ, Data: bytes.Clone(data)}, nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := r.arrayHeader()
		if err != nil {
			return nil, err
		}
		if n > len(r.b)-r.off {
			return nil, r.errf("array of %d items exceeds the %d bytes that remain", n, len(r.b)-r.off)
		}
		// The header's count is the sender's claim: never allocate more
		// than the node budget still allows.
		out := make([]any, 0, min(n, max(nodeBudget(len(r.b))-r.nodes, 0)))
		for i := 0; i < n; i++ {
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, _, err := r.mapHeader()
		if err != nil {
			return nil, err
		}
		if 2*n > len(r.b)-r.off {
			return nil, r.errf("map of %d items exceeds the %d bytes that remain", n, len(r.b)-r.off)
		}
		out := make(Map, 0, min(n, max(nodeBudget(len(r.b))-r.nodes, 0)/2))
		for i := 0; i < n; i++ {
			k, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			switch k.(type) {
			case []any, Map:
				return nil, r.errf("unhashable map key")
			}
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, MapItem{k, v})
		}
		return out, nil
	}
	return nil, r.errf("invalid opcode 0x%02x", c)
}

// value decodes one JSON value as msgspec decodes into Any.
func (r *jsReader) value(depth int) (Value, error) {
	if depth > maxDepth {
		return nil, r.errf("nesting deeper than %d", maxDepth)
	}
	if r.nodes++; r.nodes > nodeBudget(len(r.b)) {
		return nil, r.errf("more than %d values in %d bytes: refused, as decoding them would take far more memory than the record", nodeBudget(len(r.b)), len(r.b))
	}
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	switch {
	case c == 'n':
		if r.literal("null") {
			return nil, nil
		}
	case c == 't' || c == 'f':
		return r.boolean()
	case c == '"':
		return r.str()
	case c == '-' || (c >= '0' && c <= '9'):
		text, isInt, err := r.number()
		if err != nil {
			return nil, err
		}
		return parseJSONNumber(text, isInt)
	case c == '[':
		r.off++
		out := []any{}
		for first := true; ; first = false {
			c, err := r.peek()
			if err != nil {
				return nil, err
			}
			if c == ']' {
				r.off++
				return out, nil
			}
			if !first {
				if c != ',' {
					return nil, r.errf("expected ',' or ']', got %q", c)
				}
				r.off++
			}
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
	case c == '{':
		r.off++
		out := Map{}
		for first := true; ; first = false {
			k, more, err := r.nextKey(first)
			if err != nil {
				return nil, err
			}
			if !more {
				return out, nil
			}
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, MapItem{k, v})
		}
	}
	return nil, r.errf("%s", jsonTypeName(c))
}

func parseJSONNumber(text string, isInt bool) (Value, error) {
	if isInt {
		if i, err := strconv.ParseInt(text, 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(text, 10, 64); err == nil {
			return u, nil
		}
		return BigInt(text), nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return f, nil // ±Inf or 0, as Python's float() gives
		}
		return nil, fmt.Errorf("invalid number %q", text)
	}
	return f, nil
}

// sortedItems returns m's items in msgspec's deterministic order: str keys
// by code point (= UTF-8 byte order), numbers numerically. A map mixing key
// kinds cannot be ordered, as in msgspec.
func sortedItems(m Map) (Map, error) {
	kind := -1
	for _, it := range m {
		k := 0
		switch it.Key.(type) {
		case string:
			k = 1
		case int64, uint64, BigInt:
			k = 2
		case float64:
			k = 3
		}
		if kind == -1 {
			kind = k
		}
		if k != kind || k == 0 {
			return nil, fmt.Errorf("dict keys of mixed or unsortable types")
		}
	}
	out := slices.Clone(m)
	slices.SortStableFunc(out, func(a, b MapItem) int {
		switch ka := a.Key.(type) {
		case string:
			return cmp.Compare(ka, b.Key.(string))
		case float64:
			return cmp.Compare(ka, b.Key.(float64))
		}
		return bigOf(a.Key).Cmp(bigOf(b.Key))
	})
	return out, nil
}

func bigOf(v Value) *big.Int {
	switch x := v.(type) {
	case int64:
		return big.NewInt(x)
	case uint64:
		return new(big.Int).SetUint64(x)
	case BigInt:
		b, _ := new(big.Int).SetString(string(x), 10)
		if b == nil {
			return new(big.Int)
		}
		return b
	}
	return new(big.Int)
}

// writeValue encodes v as msgpack. keepOrder writes maps in the order held
// (used for values of unknown fields, which may be structs).
func (w *mpWriter) writeValue(v Value, keepOrder bool, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nesting deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case nil:
		w.nil()
	case bool:
		w.boolean(x)
	case int64:
		w.int(x)
	case int:
		w.int(int64(x))
	case uint64:
		w.uint(x)
	case BigInt:
		return ErrIntOverflow
	case float64:
		w.float(x)
	case string:
		w.str(x)
	case []byte:
		w.bin(x)
	case Time:
		w.datetime(x)
	case Ext:
		w.ext(x)
	case []any:
		w.arrayHeader(len(x))
		for _, e := range x {
			if err := w.writeValue(e, keepOrder, depth+1); err != nil {
				return err
			}
		}
	case Map:
		items := x
		if !keepOrder {
			var err error
			if items, err = sortedItems(x); err != nil {
				return err
			}
		}
		w.mapHeader(len(items))
		for _, it := range items {
			if err := w.writeValue(it.Key, keepOrder, depth+1); err != nil {
				return err
			}
			if err := w.writeValue(it.Value, keepOrder, depth+1); err != nil {
				return err
			}
		}
	case Struct:
		w.structHeader(len(x.Fields), x.Declared)
		for _, f := range x.Fields {
			w.str(f.Name)
			if err := w.writeValue(f.Value, keepOrder, depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("cannot encode %T", v)
	}
	return nil
}

// appendJSONValue encodes v as msgspec's JSON encoder does.
func appendJSONValue(b []byte, v Value, keepOrder bool, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nesting deeper than %d", maxDepth)
	}
	var err error
	switch x := v.(type) {
	case nil:
		b = append(b, "null"...)
	case bool:
		b = strconv.AppendBool(b, x)
	case int64:
		b = strconv.AppendInt(b, x, 10)
	case int:
		b = strconv.AppendInt(b, int64(x), 10)
	case uint64:
		b = strconv.AppendUint(b, x, 10)
	case BigInt:
		b = append(b, x...)
	case float64:
		b = appendJSONFloat(b, x)
	case string:
		b = appendJSONString(b, x)
	case []byte:
		b = appendJSONBytes(b, x)
	case Time:
		b = append(b, '"')
		b = x.appendFormat(b)
		b = append(b, '"')
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendJSONValue(b, e, keepOrder, depth+1); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	case Map:
		items := x
		if !keepOrder {
			if items, err = sortedItems(x); err != nil {
				return nil, err
			}
		}
		b = append(b, '{')
		for i, it := range items {
			if i > 0 {
				b = append(b, ',')
			}
			switch k := it.Key.(type) {
			case string:
				b = appendJSONString(b, k)
			case int64, uint64, BigInt:
				b = append(b, '"')
				b = append(b, bigOf(k).String()...)
				b = append(b, '"')
			default:
				return nil, fmt.Errorf("JSON object keys must be str or int, got %T", it.Key)
			}
			b = append(b, ':')
			if b, err = appendJSONValue(b, it.Value, keepOrder, depth+1); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	case Struct:
		b = append(b, '{')
		for i, f := range x.Fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, f.Name)
			b = append(b, ':')
			if b, err = appendJSONValue(b, f.Value, keepOrder, depth+1); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	default:
		return nil, fmt.Errorf("cannot encode %T as JSON", v)
	}
	return b, nil
}

// EncodeValue encodes an Any value (dicts sorted, structs in field order)
// in the given encoding, as msgspec's deterministic encoder does. It is how
// test writers and tools produce user payloads byte-identical to SpecStar's.
func EncodeValue(enc Encoding, v Value) ([]byte, error) {
	if enc == JSON {
		return appendJSONValue(nil, v, false, 0)
	}
	w := newMPWriter()
	if err := w.writeValue(v, false, 0); err != nil {
		return nil, err
	}
	return w.bytes(), nil
}

// DecodeValue decodes one whole msgpack or JSON document as msgspec decodes
// into Any.
func DecodeValue(enc Encoding, data []byte) (Value, error) {
	if enc == JSON {
		r := &jsReader{b: data}
		v, err := r.value(0)
		if err == nil {
			err = r.end()
		}
		return v, err
	}
	r := &mpReader{b: data}
	v, err := r.value(0)
	if err == nil && !r.eof() {
		err = r.errf("trailing bytes after msgpack value")
	}
	return v, err
}
