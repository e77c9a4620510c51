package events

import "strconv"

// Field constructors for the schemas in this package. Each one binds a
// field name to an accessor and to the msgpack and JSON codec of its type.

func always[T any](*T) bool { return true }

func strField[T any](name string, get func(*T) *string) field[T] {
	return field[T]{
		name: name, required: true, present: always[T],
		encMP:    func(w *mpWriter, v *T) error { w.str(*get(v)); return nil },
		appendJS: func(b []byte, v *T) ([]byte, error) { return appendJSONString(b, *get(v)), nil },
		decMP: func(r *mpReader, v *T) (err error) {
			*get(v), err = r.str()
			return err
		},
		decJS: func(r *jsReader, v *T) (err error) {
			*get(v), err = r.str()
			return err
		},
	}
}

// withDefault makes a field optional on decode, filling def when missing.
func withDefault[T any](f field[T], def func(*T)) field[T] {
	f.required = false
	f.setDefault = def
	return f
}

// uuidField is a uuid.UUID: written as the canonical 36-char lowercase
// string; msgspec also accepts 32 hex digits and upper case on decode.
func uuidField[T any](name string, get func(*T) *string) field[T] {
	f := strField(name, get)
	f.decMP = func(r *mpReader, v *T) error {
		start := r.off
		s, err := r.str()
		if err != nil {
			return err
		}
		if *get(v), err = canonicalUUID(s); err != nil {
			r.off = start
			return r.errf("%v", err)
		}
		return nil
	}
	f.decJS = func(r *jsReader, v *T) error {
		start := r.off
		s, err := r.str()
		if err != nil {
			return err
		}
		if *get(v), err = canonicalUUID(s); err != nil {
			r.off = start
			r.ws()
			return r.errf("%v", err)
		}
		return nil
	}
	return f
}

func intField[T any](name string, get func(*T) *int64) field[T] {
	return field[T]{
		name: name, required: true, present: always[T],
		encMP:    func(w *mpWriter, v *T) error { w.int(*get(v)); return nil },
		appendJS: func(b []byte, v *T) ([]byte, error) { return strconv.AppendInt(b, *get(v), 10), nil },
		decMP: func(r *mpReader, v *T) (err error) {
			*get(v), err = r.int64()
			return err
		},
		decJS: func(r *jsReader, v *T) (err error) {
			*get(v), err = r.int64()
			return err
		},
	}
}

func boolField[T any](name string, get func(*T) *bool) field[T] {
	return field[T]{
		name: name, required: true, present: always[T],
		encMP:    func(w *mpWriter, v *T) error { w.boolean(*get(v)); return nil },
		appendJS: func(b []byte, v *T) ([]byte, error) { return strconv.AppendBool(b, *get(v)), nil },
		decMP: func(r *mpReader, v *T) (err error) {
			*get(v), err = r.boolean()
			return err
		},
		decJS: func(r *jsReader, v *T) (err error) {
			*get(v), err = r.boolean()
			return err
		},
	}
}

func timeField[T any](name string, get func(*T) *Time) field[T] {
	return field[T]{
		name: name, required: true, present: always[T],
		encMP: func(w *mpWriter, v *T) error { w.datetime(*get(v)); return nil },
		appendJS: func(b []byte, v *T) ([]byte, error) {
			b = append(b, '"')
			b = get(v).appendFormat(b)
			return append(b, '"'), nil
		},
		decMP: func(r *mpReader, v *T) (err error) {
			*get(v), err = r.datetime()
			return err
		},
		decJS: func(r *jsReader, v *T) (err error) {
			*get(v), err = r.datetime()
			return err
		},
	}
}

// bytesField holds bytes; decoded values share memory with the input.
func bytesField[T any](name string, get func(*T) *[]byte) field[T] {
	return field[T]{
		name: name, required: true, present: always[T],
		encMP:    func(w *mpWriter, v *T) error { w.bin(*get(v)); return nil },
		appendJS: func(b []byte, v *T) ([]byte, error) { return appendJSONBytes(b, *get(v)), nil },
		decMP: func(r *mpReader, v *T) (err error) {
			*get(v), err = r.bin()
			return err
		},
		decJS: func(r *jsReader, v *T) (err error) {
			*get(v), err = r.bytes()
			return err
		},
	}
}

// optField wraps the codec of an inner field type in Opt[V]: UNSET is not
// written, None is null. When nullDefault is set the declared default is
// None (always written, filled in when missing); otherwise it is UNSET.
func optField[T, V any](inner func(string, func(*V) *V) field[V], name string, get func(*T) *Opt[V], nullDefault bool) field[T] {
	in := inner(name, func(x *V) *V { return x })
	f := field[T]{
		name: name,
		present: func(v *T) bool {
			return nullDefault || get(v).Present
		},
		setDefault: func(v *T) {
			if nullDefault {
				*get(v) = Null[V]()
			}
		},
		encMP: func(w *mpWriter, v *T) error {
			o := get(v)
			if !o.Present || o.Null {
				w.nil()
				return nil
			}
			return in.encMP(w, &o.Value)
		},
		appendJS: func(b []byte, v *T) ([]byte, error) {
			o := get(v)
			if !o.Present || o.Null {
				return append(b, "null"...), nil
			}
			return in.appendJS(b, &o.Value)
		},
		decMP: func(r *mpReader, v *T) error {
			o := get(v)
			if r.isNil() {
				*o = Null[V]()
				return nil
			}
			*o = Opt[V]{Present: true}
			return in.decMP(r, &o.Value)
		},
		decJS: func(r *jsReader, v *T) error {
			o := get(v)
			if r.isNull() {
				*o = Null[V]()
				return nil
			}
			*o = Opt[V]{Present: true}
			return in.decJS(r, &o.Value)
		},
	}
	return f
}

// valueField is an Any-typed field (e.g. dict[str, Any]): dicts are
// written with sorted keys.
func valueField[T any](name string, get func(*T) *Value) field[T] {
	return field[T]{
		name: name, required: true, present: always[T],
		encMP: func(w *mpWriter, v *T) error { return w.writeValue(*get(v), false, 0) },
		appendJS: func(b []byte, v *T) ([]byte, error) {
			return appendJSONValue(b, *get(v), false, 0)
		},
		decMP: func(r *mpReader, v *T) (err error) {
			*get(v), err = r.value(0)
			return err
		},
		decJS: func(r *jsReader, v *T) (err error) {
			*get(v), err = r.value(0)
			return err
		},
	}
}

// canonicalUUID accepts what msgspec's UUID decoder accepts (36-char
// hyphenated or 32 hex digits, either case) and returns the 36-char
// lowercase form msgspec writes.
func canonicalUUID(s string) (string, error) {
	var hex []byte
	switch len(s) {
	case 36:
		if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return "", errInvalidUUID(s)
		}
		hex = make([]byte, 0, 32)
		hex = append(hex, s[0:8]...)
		hex = append(hex, s[9:13]...)
		hex = append(hex, s[14:18]...)
		hex = append(hex, s[19:23]...)
		hex = append(hex, s[24:36]...)
	case 32:
		hex = []byte(s)
	default:
		return "", errInvalidUUID(s)
	}
	for i, c := range hex {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			hex[i] = c + ('a' - 'A')
		default:
			return "", errInvalidUUID(s)
		}
	}
	out := make([]byte, 0, 36)
	out = append(out, hex[0:8]...)
	out = append(out, '-')
	out = append(out, hex[8:12]...)
	out = append(out, '-')
	out = append(out, hex[12:16]...)
	out = append(out, '-')
	out = append(out, hex[16:20]...)
	out = append(out, '-')
	out = append(out, hex[20:32]...)
	return string(out), nil
}

type errInvalidUUID string

func (e errInvalidUUID) Error() string { return "invalid UUID " + strconv.Quote(string(e)) }
