package events

import (
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// This file converts between the fixtures' JSON description of a struct
// (fixtures README section 2: datetimes as RFC 3339 with 6 digits, special
// values as {"$datetime"}, {"$float"}, {"$bytes_hex"}) and our Go types.

// fixtureValue turns a parsed fixture JSON value into a Value, resolving
// the $-forms.
func fixtureValue(t *testing.T, v Value) Value {
	t.Helper()
	switch x := v.(type) {
	case Map:
		if len(x) == 1 {
			k, _ := x[0].Key.(string)
			s, _ := x[0].Value.(string)
			switch k {
			case "$datetime":
				tm, err := ParseTime(s)
				if err != nil {
					t.Fatalf("fixture datetime %q: %v", s, err)
				}
				return tm
			case "$uuid":
				return s
			case "$float":
				switch s {
				case "NaN":
					return math.Float64frombits(0x7ff8000000000000) // Python's NaN
				case "Infinity":
					return math.Inf(1)
				case "-Infinity":
					return math.Inf(-1)
				}
			case "$bytes_hex":
				b, err := hex.DecodeString(s)
				if err != nil {
					t.Fatal(err)
				}
				return b
			case "$bytes_repeat":
				m := x[0].Value.(Map)
				h, _ := m.Get("hex")
				c, _ := m.Get("count")
				unit, _ := hex.DecodeString(h.(string))
				return []byte(strings.Repeat(string(unit), int(c.(int64))))
			}
		}
		out := make(Map, len(x))
		for i, it := range x {
			out[i] = MapItem{it.Key, fixtureValue(t, it.Value)}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fixtureValue(t, e)
		}
		return out
	}
	return v
}

// fixtureFields parses a fixture "fields" object (JSON text) into a Map.
func fixtureFields(t *testing.T, raw []byte) Map {
	t.Helper()
	v, err := DecodeValue(JSON, raw)
	if err != nil {
		t.Fatalf("parse fixture fields: %v", err)
	}
	return fixtureValue(t, v).(Map)
}

type fieldReader struct {
	t *testing.T
	m Map
}

func (f fieldReader) has(k string) bool { _, ok := f.m.Get(k); return ok }

func (f fieldReader) str(k string) string {
	v, ok := f.m.Get(k)
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		f.t.Fatalf("fixture field %s: want str, got %T", k, v)
	}
	return s
}

func (f fieldReader) optStr(k string) Opt[string] {
	v, ok := f.m.Get(k)
	if !ok {
		return Opt[string]{}
	}
	if v == nil {
		return Null[string]()
	}
	return Some(f.str(k))
}

func (f fieldReader) int(k string) int64 {
	v, _ := f.m.Get(k)
	switch x := v.(type) {
	case int64:
		return x
	}
	f.t.Fatalf("fixture field %s: want int, got %T", k, v)
	return 0
}

func (f fieldReader) time(k string) Time {
	if v, _ := f.m.Get(k); v != nil {
		if tm, ok := v.(Time); ok {
			return tm
		}
	}
	tm, err := ParseTime(f.str(k))
	if err != nil {
		f.t.Fatalf("fixture field %s: %v", k, err)
	}
	return tm
}

func (f fieldReader) optTime(k string) Opt[Time] {
	if !f.has(k) {
		return Opt[Time]{}
	}
	return Some(f.time(k))
}

func (f fieldReader) bytes(k string) []byte {
	v, _ := f.m.Get(k)
	b, ok := v.([]byte)
	if !ok {
		f.t.Fatalf("fixture field %s: want bytes, got %T", k, v)
	}
	return b
}

func revisionInfoFromFixture(t *testing.T, m Map) *RevisionInfo {
	f := fieldReader{t, m}
	return &RevisionInfo{
		UID: f.str("uid"), ResourceID: f.str("resource_id"), RevisionID: f.str("revision_id"),
		ParentRevisionID: f.optStr("parent_revision_id"), ParentSchemaVersion: f.optStr("parent_schema_version"),
		SchemaVersion: f.optStr("schema_version"), DataHash: f.optStr("data_hash"), Status: f.str("status"),
		CreatedTime: f.time("created_time"), UpdatedTime: f.time("updated_time"),
		CreatedBy: f.str("created_by"), UpdatedBy: f.str("updated_by"),
	}
}

func resourceMetaFromFixture(t *testing.T, m Map) *ResourceMeta {
	f := fieldReader{t, m}
	v := &ResourceMeta{
		CurrentRevisionID: f.str("current_revision_id"), ResourceID: f.str("resource_id"),
		SchemaVersion: f.optStr("schema_version"), TotalRevisionCount: f.int("total_revision_count"),
		CreatedTime: f.time("created_time"), UpdatedTime: f.time("updated_time"),
		CreatedBy: f.str("created_by"), UpdatedBy: f.str("updated_by"),
		RevStatus: f.optStr("rev_status"), RevCreatedBy: f.optStr("rev_created_by"), RevUpdatedBy: f.optStr("rev_updated_by"),
		RevCreatedTime: f.optTime("rev_created_time"), RevUpdatedTime: f.optTime("rev_updated_time"),
	}
	if d, ok := m.Get("is_deleted"); ok {
		v.IsDeleted = d.(bool)
	}
	if d, ok := m.Get("indexed_data"); ok {
		v.IndexedData = Some(d)
	}
	return v
}

func binaryFromFixture(t *testing.T, m Map) *Binary {
	f := fieldReader{t, m}
	v := &Binary{FileID: f.optStr("file_id"), ContentType: f.optStr("content_type")}
	if f.has("size") {
		v.Size = Some(f.int("size"))
	}
	if f.has("data") {
		v.Data = Some(f.bytes("data"))
	}
	return v
}

func rawResourceFromFixture(t *testing.T, m Map) *RawResource {
	info, _ := m.Get("info")
	return &RawResource{Info: *revisionInfoFromFixture(t, info.(Map)), RawData: fieldReader{t, m}.bytes("raw_data")}
}

// recordFromFixture builds a DumpRecord of the named type.
func recordFromFixture(t *testing.T, typ string, m Map) Record {
	f := fieldReader{t, m}
	switch typ {
	case TagHeader:
		r := &HeaderRecord{Version: FormatVersion}
		if f.has("version") {
			r.Version = f.int("version")
		}
		return r
	case TagModelStart:
		return &ModelStartRecord{ModelName: f.str("model_name")}
	case TagModelEnd:
		return &ModelEndRecord{ModelName: f.str("model_name")}
	case TagMeta:
		return &MetaRecord{Data: f.bytes("data")}
	case TagRevision:
		return &RevisionRecord{Data: f.bytes("data")}
	case TagBlob:
		return &BlobRecord{FileID: f.str("file_id"), BlobData: f.bytes("blob_data"), Size: f.int("size"), ContentType: f.str("content_type")}
	case TagEOF:
		return &EofRecord{}
	}
	t.Fatalf("unknown record type %q", typ)
	return nil
}

// describe renders a value in the fixtures' JSON conventions, for
// comparing what we decoded with what the fixture says upstream decoded.
func describe(v Value) string {
	var b strings.Builder
	describeTo(&b, v)
	return b.String()
}

func fixtureTime(t Time) string {
	s := t.Time.Format("2006-01-02T15:04:05.000000")
	if t.Naive {
		return s
	}
	_, off := t.Zone()
	if off == 0 {
		return s + "Z"
	}
	return s + t.Time.Format("-07:00")
}

func describeTo(b *strings.Builder, v Value) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case Time:
		fmt.Fprintf(b, `{"$datetime":%q}`, fixtureTime(x))
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString(`{"$float":"NaN"}`)
		case math.IsInf(x, 1):
			b.WriteString(`{"$float":"Infinity"}`)
		case math.IsInf(x, -1):
			b.WriteString(`{"$float":"-Infinity"}`)
		default:
			b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
		}
	case []byte:
		fmt.Fprintf(b, `{"$bytes_hex":%q}`, hex.EncodeToString(x))
	case string:
		b.WriteString(strconv.Quote(x))
	case []any:
		b.WriteString("[")
		for i, e := range x {
			if i > 0 {
				b.WriteString(",")
			}
			describeTo(b, e)
		}
		b.WriteString("]")
	case Map:
		// Keys sorted: order is checked byte-for-byte elsewhere.
		x = slices.Clone(x)
		slices.SortFunc(x, func(a, b MapItem) int { return strings.Compare(describe(a.Key), describe(b.Key)) })
		b.WriteString("{")
		for i, it := range x {
			if i > 0 {
				b.WriteString(",")
			}
			describeTo(b, it.Key)
			b.WriteString(":")
			describeTo(b, it.Value)
		}
		b.WriteString("}")
	default:
		fmt.Fprintf(b, "%v", x)
	}
}

// structMap renders a decoded struct as the fixture would list it: typed
// datetime fields as plain strings, UNSET fields absent.
func revisionInfoMap(v *RevisionInfo) Map {
	m := Map{{"uid", v.UID}, {"resource_id", v.ResourceID}, {"revision_id", v.RevisionID}}
	m = appendOpt(m, "parent_revision_id", v.ParentRevisionID)
	m = appendOpt(m, "parent_schema_version", v.ParentSchemaVersion)
	m = appendOpt(m, "schema_version", v.SchemaVersion)
	m = appendOpt(m, "data_hash", v.DataHash)
	return append(m, MapItem{"status", v.Status}, MapItem{"created_time", fixtureTime(v.CreatedTime)},
		MapItem{"updated_time", fixtureTime(v.UpdatedTime)}, MapItem{"created_by", v.CreatedBy}, MapItem{"updated_by", v.UpdatedBy})
}

func resourceMetaMap(v *ResourceMeta) Map {
	m := Map{{"current_revision_id", v.CurrentRevisionID}, {"resource_id", v.ResourceID}}
	m = appendOpt(m, "schema_version", v.SchemaVersion)
	m = append(m, MapItem{"total_revision_count", v.TotalRevisionCount}, MapItem{"created_time", fixtureTime(v.CreatedTime)},
		MapItem{"updated_time", fixtureTime(v.UpdatedTime)}, MapItem{"created_by", v.CreatedBy}, MapItem{"updated_by", v.UpdatedBy},
		MapItem{"is_deleted", v.IsDeleted})
	if v.IndexedData.Present {
		m = append(m, MapItem{"indexed_data", v.IndexedData.Value})
	}
	return m
}

func binaryMap(v *Binary) Map {
	m := appendOpt(Map{}, "file_id", v.FileID)
	if v.Size.Present {
		m = append(m, MapItem{"size", v.Size.Value})
	}
	m = appendOpt(m, "content_type", v.ContentType)
	if v.Data.Present {
		m = append(m, MapItem{"data", v.Data.Value})
	}
	return m
}

func appendOpt(m Map, k string, o Opt[string]) Map {
	switch {
	case !o.Present:
		return m
	case o.Null:
		return append(m, MapItem{k, nil})
	}
	return append(m, MapItem{k, o.Value})
}

// normalize resolves typed datetime strings in a fixture Map so that they
// compare equal to fixtureTime's rendering.
func normalizeTimes(m Map, keys ...string) Map {
	out := make(Map, len(m))
	copy(out, m)
	for i, it := range out {
		for _, k := range keys {
			if it.Key == k {
				if tm, ok := it.Value.(Time); ok {
					out[i].Value = fixtureTime(tm)
				}
				if s, ok := it.Value.(string); ok {
					if tm, err := ParseTime(s); err == nil {
						out[i].Value = fixtureTime(tm)
					}
				}
			}
		}
	}
	return out
}
