package events

import (
	"fmt"
)

// Encoding is one of SpecStar's two payload encodings.
type Encoding int

const (
	// JSON is msgspec.json.Encoder(order="deterministic"), SpecStar's default.
	JSON Encoding = iota
	// Msgpack is msgspec.msgpack.Encoder(order="deterministic").
	Msgpack
)

func (e Encoding) String() string {
	if e == Msgpack {
		return "msgpack"
	}
	return "json"
}

// ParseEncoding reads "json" or "msgpack".
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "json":
		return JSON, nil
	case "msgpack":
		return Msgpack, nil
	}
	return JSON, fmt.Errorf("unknown encoding %q (want json or msgpack)", s)
}

// Opt is a struct field that msgspec may leave UNSET (the key is absent)
// or set to None (null). The zero value is UNSET.
type Opt[T any] struct {
	Present bool // false means UNSET: the key is not written
	Null    bool // Present and None
	Value   T
}

// Some returns a set, non-null Opt.
func Some[T any](v T) Opt[T] { return Opt[T]{Present: true, Value: v} }

// Null returns an Opt set to None.
func Null[T any]() Opt[T] { return Opt[T]{Present: true, Null: true} }

// IsSet reports whether the field holds a value (neither UNSET nor None).
func (o Opt[T]) IsSet() bool { return o.Present && !o.Null }

// Unknown holds what a decoded struct carried beyond the fields this
// version knows (SpecStar evolves its structs additively), so that
// re-encoding gives back the identical bytes.
type Unknown struct {
	fields []unknownField
	// wide records a map16 header on fewer than 16 entries: the msgspec
	// quirk for structs declaring 16+ fields (a newer SpecStar's).
	wide bool
}

type unknownField struct {
	name string
	pos  int // index among the written keys (tag included) where it stood
	raw  []byte
	enc  Encoding
}

// Len is the number of unknown fields kept.
func (u *Unknown) Len() int { return len(u.fields) }

// Names lists the unknown field names in the order read.
func (u *Unknown) Names() []string {
	out := make([]string, len(u.fields))
	for i, f := range u.fields {
		out[i] = f.name
	}
	return out
}

// field describes how one struct field is encoded and decoded.
type field[T any] struct {
	name string
	// required: decoding fails when the key is missing (msgspec: "Object
	// missing required field").
	required bool
	// present reports whether the field is written (false for UNSET).
	present func(*T) bool
	// setDefault applies the declared default when the key is missing.
	setDefault func(*T)
	encMP      func(*mpWriter, *T) error
	appendJS   func([]byte, *T) ([]byte, error)
	decMP      func(*mpReader, *T) error
	decJS      func(*jsReader, *T) error
}

// schema is a msgspec Struct: its name, optional tag and declared fields.
type schema[T any] struct {
	name   string
	tag    string // non-empty for tagged DumpRecord structs: {"t": tag, ...}
	fields []field[T]
	index  map[string]int
}

func newSchema[T any](name, tag string, fields ...field[T]) *schema[T] {
	s := &schema[T]{name: name, tag: tag, fields: fields, index: map[string]int{}}
	for i, f := range fields {
		s.index[f.name] = i
	}
	return s
}

func (s *schema[T]) wrap(err error, fieldName string) error {
	if de, ok := err.(*DecodeError); ok {
		if de.Struct == "" {
			de.Struct = s.name
			if de.Field == "" {
				de.Field = fieldName
			}
		}
		return de
	}
	if fieldName != "" {
		return fmt.Errorf("%s.%s: %w", s.name, fieldName, err)
	}
	return fmt.Errorf("%s: %w", s.name, err)
}

// encode writes v in enc. Unknown fields are put back where they stood.
func (s *schema[T]) encode(enc Encoding, v *T, u *Unknown) ([]byte, error) {
	if enc == JSON {
		return s.appendJSON(nil, v, u)
	}
	w := newMPWriter()
	if err := s.encodeMP(w, v, u); err != nil {
		return nil, err
	}
	return w.bytes(), nil
}

func (s *schema[T]) count(v *T, u *Unknown) int {
	n := len(u.fields)
	if s.tag != "" {
		n++
	}
	for i := range s.fields {
		if s.fields[i].present(v) {
			n++
		}
	}
	return n
}

// each calls known(i) or unknown(j) for the keys in written order.
func (s *schema[T]) each(v *T, u *Unknown, known func(int) error, unknown func(int) error) error {
	pos := 0
	if s.tag != "" {
		pos = 1
	}
	next := 0
	flush := func(final bool) error {
		for next < len(u.fields) && (final || u.fields[next].pos <= pos) {
			if err := unknown(next); err != nil {
				return err
			}
			next++
			pos++
		}
		return nil
	}
	for i := range s.fields {
		if !s.fields[i].present(v) {
			continue
		}
		if err := flush(false); err != nil {
			return err
		}
		if err := known(i); err != nil {
			return err
		}
		pos++
	}
	return flush(true)
}

func (s *schema[T]) encodeMP(w *mpWriter, v *T, u *Unknown) error {
	n := s.count(v, u)
	declared := len(s.fields) + len(u.fields)
	if s.tag != "" {
		declared++
	}
	if u.wide {
		declared = 16
	}
	w.structHeader(n, declared)
	if s.tag != "" {
		w.str("t")
		w.str(s.tag)
	}
	return s.each(v, u, func(i int) error {
		f := &s.fields[i]
		w.str(f.name)
		if err := f.encMP(w, v); err != nil {
			return s.wrap(err, f.name)
		}
		return nil
	}, func(j int) error {
		uf := &u.fields[j]
		w.str(uf.name)
		if uf.enc == Msgpack {
			w.raw(uf.raw)
			return nil
		}
		val, err := DecodeValue(JSON, uf.raw)
		if err == nil {
			err = w.writeValue(val, true, 0)
		}
		if err != nil {
			return s.wrap(err, uf.name)
		}
		return nil
	})
}

func (s *schema[T]) appendJSON(b []byte, v *T, u *Unknown) ([]byte, error) {
	b = append(b, '{')
	first := true
	sep := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	if s.tag != "" {
		sep()
		b = append(b, `"t":`...)
		b = appendJSONString(b, s.tag)
	}
	err := s.each(v, u, func(i int) error {
		f := &s.fields[i]
		sep()
		b = appendJSONString(b, f.name)
		b = append(b, ':')
		var err error
		if b, err = f.appendJS(b, v); err != nil {
			return s.wrap(err, f.name)
		}
		return nil
	}, func(j int) error {
		uf := &u.fields[j]
		sep()
		b = appendJSONString(b, uf.name)
		b = append(b, ':')
		if uf.enc == JSON {
			b = append(b, uf.raw...)
			return nil
		}
		val, err := DecodeValue(Msgpack, uf.raw)
		if err == nil {
			b, err = appendJSONValue(b, val, true, 0)
		}
		if err != nil {
			return s.wrap(err, uf.name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// decode reads a whole encoded struct into v, keeping unknown fields in u.
func (s *schema[T]) decode(enc Encoding, data []byte, v *T, u *Unknown) error {
	if enc == JSON {
		r := &jsReader{b: data}
		if err := s.decodeJSON(r, v, u); err != nil {
			return err
		}
		if err := r.end(); err != nil {
			return s.wrap(err, "")
		}
		return nil
	}
	r := &mpReader{b: data}
	if err := s.decodeMP(r, v, u); err != nil {
		return err
	}
	if !r.eof() {
		return s.wrap(r.errf("trailing bytes after %s", s.name), "")
	}
	return nil
}

// seenSet tracks which declared fields were read; structs here have far
// fewer than 64 fields.
type seenSet uint64

func (s *schema[T]) finish(v *T, seen seenSet, sawTag bool, off int) error {
	if s.tag != "" && !sawTag {
		return &DecodeError{Struct: s.name, Offset: off, Msg: "object missing required field `t`"}
	}
	for i := range s.fields {
		if seen&(1<<i) != 0 {
			continue
		}
		f := &s.fields[i]
		if f.required {
			return &DecodeError{Struct: s.name, Offset: off, Msg: fmt.Sprintf("object missing required field `%s`", f.name)}
		}
		if f.setDefault != nil {
			f.setDefault(v)
		}
	}
	return nil
}

func (s *schema[T]) decodeMP(r *mpReader, v *T, u *Unknown) error {
	start := r.off
	n, wide, err := r.mapHeader()
	if err != nil {
		return s.wrap(err, "")
	}
	u.fields = u.fields[:0]
	u.wide = wide && n < 16
	var seen seenSet
	sawTag := false
	for pos := 0; pos < n; pos++ {
		kb, err := r.strBytes()
		if err != nil {
			return s.wrap(err, "")
		}
		if i, ok := s.index[string(kb)]; ok { // no allocation for known keys
			if err := s.fields[i].decMP(r, v); err != nil {
				return s.wrap(err, s.fields[i].name)
			}
			seen |= 1 << i
			continue
		}
		key := string(kb)
		if s.tag != "" && key == "t" {
			tag, err := r.str()
			if err != nil {
				return s.wrap(err, "t")
			}
			if tag != s.tag {
				return s.wrap(r.errf("tag %q is not %q", tag, s.tag), "t")
			}
			sawTag = true
			continue
		}
		raw, err := r.skip()
		if err != nil {
			return s.wrap(err, key)
		}
		u.fields = append(u.fields, unknownField{name: key, pos: pos, raw: raw, enc: Msgpack})
	}
	return s.finish(v, seen, sawTag, start)
}

func (s *schema[T]) decodeJSON(r *jsReader, v *T, u *Unknown) error {
	start := r.off
	if err := r.objectStart(); err != nil {
		return s.wrap(err, "")
	}
	u.fields = u.fields[:0]
	var seen seenSet
	sawTag := false
	for pos := 0; ; pos++ {
		key, more, err := r.nextKey(pos == 0)
		if err != nil {
			return s.wrap(err, "")
		}
		if !more {
			break
		}
		if s.tag != "" && key == "t" {
			tag, err := r.str()
			if err != nil {
				return s.wrap(err, "t")
			}
			if tag != s.tag {
				return s.wrap(r.errf("tag %q is not %q", tag, s.tag), "t")
			}
			sawTag = true
			continue
		}
		if i, ok := s.index[key]; ok {
			if err := s.fields[i].decJS(r, v); err != nil {
				return s.wrap(err, key)
			}
			seen |= 1 << i
			continue
		}
		raw, err := r.skip()
		if err != nil {
			return s.wrap(err, key)
		}
		u.fields = append(u.fields, unknownField{name: key, pos: pos, raw: raw, enc: JSON})
	}
	return s.finish(v, seen, sawTag, start)
}
