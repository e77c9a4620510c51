package events

// BinaryRef is a Binary field found in a stored payload: the blob a
// revision references, which a replica needs beside it.
type BinaryRef struct {
	FileID      string
	Size        int64 // -1 if the payload does not say
	ContentType string
}

// BinaryRefs finds the Binary fields of a decoded payload generically,
// without the user's Struct types: any map holding a "file_id" of 32
// lowercase hex digits and a "size" (int) or "content_type" (str) — the
// shape SpecStar leaves in a payload after moving Binary.data to the blob
// store. Each file_id is reported once, in order of appearance.
func BinaryRefs(v Value) []BinaryRef {
	var out []BinaryRef
	seen := map[string]bool{}
	var walk func(v Value, depth int)
	walk = func(v Value, depth int) {
		if depth > maxDepth {
			return
		}
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e, depth+1)
			}
		case Struct:
			m := make(Map, len(x.Fields))
			for i, f := range x.Fields {
				m[i] = MapItem{f.Name, f.Value}
			}
			walk(m, depth)
		case Map:
			if ref, ok := binaryRef(x); ok {
				if !seen[ref.FileID] {
					seen[ref.FileID] = true
					out = append(out, ref)
				}
				return
			}
			for _, it := range x {
				walk(it.Value, depth+1)
			}
		}
	}
	walk(v, 0)
	return out
}

func binaryRef(m Map) (BinaryRef, bool) {
	ref := BinaryRef{Size: -1}
	idv, ok := m.Get("file_id")
	id, isStr := idv.(string)
	if !ok || !isStr || len(id) != 32 {
		return ref, false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ref, false
		}
	}
	ref.FileID = id
	shaped := false
	if s, ok := m.Get("size"); ok {
		switch n := s.(type) {
		case int64:
			ref.Size, shaped = n, true
		case uint64:
			ref.Size, shaped = int64(n), true
		}
	}
	if c, ok := m.Get("content_type"); ok {
		if s, ok := c.(string); ok {
			ref.ContentType, shaped = s, true
		}
	}
	return ref, shaped
}

// PayloadBinaryRefs decodes a stored payload (JSON text or msgpack, told
// apart by its first byte) and returns its Binary references.
func PayloadBinaryRefs(payload []byte) ([]BinaryRef, error) {
	enc := Msgpack
	for _, c := range payload {
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		if c == '{' || c == '[' {
			enc = JSON
		}
		break
	}
	v, err := DecodeValue(enc, payload)
	if err != nil {
		return nil, err
	}
	return BinaryRefs(v), nil
}
