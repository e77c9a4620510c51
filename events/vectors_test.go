package events

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// vector is one case of ../shared/fixtures/vectors.json, written by the
// real msgspec encoder.
type vector struct {
	Name            string          `json:"name"`
	Struct          string          `json:"struct"`
	Encoding        string          `json:"encoding"`
	Fields          json.RawMessage `json:"fields"`
	UnsetFields     []string        `json:"unset_fields"`
	BytesHex        string          `json:"bytes_hex"`
	Text            *string         `json:"text"`
	RecordType      string          `json:"record_type"`
	FrameHex        string          `json:"frame_hex"`
	RoundtripEqual  *bool           `json:"roundtrip_equal"`
	DecodedBack     json.RawMessage `json:"decoded_back"`
	DataHash        string          `json:"data_hash"`
	Error           string          `json:"error"`
	CanonicalMsgpck *bool           `json:"canonical_msgpack"`
}

func loadVectors(t *testing.T) []vector {
	var vs []vector
	if err := json.Unmarshal(testfixtures.Read(t, "vectors.json"), &vs); err != nil {
		t.Fatalf("vectors.json: %v", err)
	}
	if len(vs) < 100 {
		t.Fatalf("vectors.json: only %d cases", len(vs))
	}
	return vs
}

// issueData builds the fixtures' Issue user Struct (gen_fixtures.py): a
// kw_only Struct whose "due" is a datetime, "comments" a list of Comment
// structs with a datetime "at", and "extra" a dict.
func issueData(t *testing.T, m Map) Value {
	s := Struct{Declared: 11}
	for _, it := range m {
		k := it.Key.(string)
		v := it.Value
		switch k {
		case "due":
			if str, ok := v.(string); ok {
				tm, err := ParseTime(str)
				if err != nil {
					t.Fatal(err)
				}
				v = tm
			}
		case "comments":
			var cs []any
			for _, c := range v.([]any) {
				cs = append(cs, toStruct(c.(Map), 3))
			}
			v = append([]any{}, cs...)
		}
		s.Fields = append(s.Fields, StructField{k, v})
	}
	return s
}

func toStruct(m Map, declared int) Struct {
	s := Struct{Declared: declared}
	for _, it := range m {
		s.Fields = append(s.Fields, StructField{it.Key.(string), it.Value})
	}
	return s
}

// TestVectorsEncode checks that every vector, built from its fields,
// encodes to exactly the bytes msgspec wrote.
func TestVectorsEncode(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			enc, err := ParseEncoding(v.Encoding)
			if err != nil {
				t.Fatal(err)
			}
			m := fixtureFields(t, v.Fields)
			var got []byte
			if v.Error != "" {
				// The case lists only the offending field.
				idx, _ := m.Get("indexed_data")
				_, err := (&ResourceMeta{IndexedData: Some(idx)}).Encode(enc)
				if !errors.Is(err, ErrIntOverflow) {
					t.Fatalf("want error like %q, got %v", v.Error, err)
				}
				return
			}
			switch v.Struct {
			case "RevisionInfo":
				got, err = revisionInfoFromFixture(t, m).Encode(enc)
			case "ResourceMeta":
				got, err = resourceMetaFromFixture(t, m).Encode(enc)
			case "RawResource":
				got, err = rawResourceFromFixture(t, m).Encode(enc)
			case "Binary":
				got, err = binaryFromFixture(t, m).Encode(enc)
			case "DumpRecord":
				got, err = recordFromFixture(t, v.RecordType, m).Encode(enc)
			case "IssueData":
				got, err = EncodeValue(enc, issueData(t, m))
			case "Wide16":
				got, err = EncodeValue(enc, toStruct(m, 16))
			default:
				t.Fatalf("unknown struct %q", v.Struct)
			}
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if want := v.BytesHex; hex.EncodeToString(got) != want {
				t.Fatalf("bytes differ from msgspec's\n got %x\nwant %s", got, want)
			}
			if v.Text != nil && string(got) != *v.Text {
				t.Fatalf("text differs\n got %s\nwant %s", got, *v.Text)
			}
			if v.FrameHex != "" {
				frame := binary.BigEndian.AppendUint32(nil, uint32(len(got)))
				if hex.EncodeToString(append(frame, got...)) != v.FrameHex {
					t.Fatalf("frame differs: want %s", v.FrameHex)
				}
			}
		})
	}
}

// TestVectorsDecode checks that msgspec's bytes decode to the fields
// upstream decoded (decoded_back where the round trip is lossy) and
// re-encode to the same bytes.
func TestVectorsDecode(t *testing.T) {
	for _, v := range loadVectors(t) {
		if v.Error != "" || v.Struct == "IssueData" || v.Struct == "Wide16" {
			continue // user structs: decoding them needs their Struct type
		}
		t.Run(v.Name, func(t *testing.T) {
			enc, _ := ParseEncoding(v.Encoding)
			data, err := hex.DecodeString(v.BytesHex)
			if err != nil {
				t.Fatal(err)
			}
			wantRaw := v.Fields
			if v.RoundtripEqual != nil && !*v.RoundtripEqual {
				wantRaw = v.DecodedBack
			}
			want := fixtureFields(t, wantRaw)
			var got Map
			var reenc []byte
			switch v.Struct {
			case "RevisionInfo":
				d, err := DecodeRevisionInfo(enc, data)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				got, want = revisionInfoMap(d), normalizeTimes(want, "created_time", "updated_time")
				reenc, err = d.Encode(enc)
				if err != nil {
					t.Fatal(err)
				}
			case "ResourceMeta":
				d, err := DecodeResourceMeta(enc, data)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				got, want = resourceMetaMap(d), normalizeTimes(want, "created_time", "updated_time")
				reenc, err = d.Encode(enc)
				if err != nil {
					t.Fatal(err)
				}
			case "RawResource":
				d, err := DecodeRawResource(enc, data)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				info, _ := want.Get("info")
				want = Map{{"info", normalizeTimes(info.(Map), "created_time", "updated_time")}, {"raw_data", fieldReader{t, want}.bytes("raw_data")}}
				got = Map{{"info", revisionInfoMap(&d.Info)}, {"raw_data", d.RawData}}
				reenc, err = d.Encode(enc)
				if err != nil {
					t.Fatal(err)
				}
			case "Binary":
				d, err := DecodeBinary(enc, data)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				got = binaryMap(d)
				reenc, err = d.Encode(enc)
				if err != nil {
					t.Fatal(err)
				}
			case "DumpRecord":
				r, err := DecodeRecord(enc, data)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if r.Tag() != v.RecordType {
					t.Fatalf("decoded as %s, want %s", r.Tag(), v.RecordType)
				}
				want := recordFromFixture(t, v.RecordType, want)
				wb, _ := want.Encode(Msgpack)
				gb, _ := r.Encode(Msgpack)
				if !bytes.Equal(wb, gb) {
					t.Fatalf("decoded record %#v, want %#v", r, want)
				}
				return
			}
			if describe(got) != describe(want) {
				t.Fatalf("decoded value differs\n got %s\nwant %s", describe(got), describe(want))
			}
			if !bytes.Equal(reenc, data) {
				t.Fatalf("re-encoding differs\n got %x\nwant %x", reenc, data)
			}
		})
	}
}

// TestVectorsUnsetFields checks that each vector's UNSET fields are absent
// from the bytes and the others present: the UNSET/None distinction.
func TestVectorsUnsetFields(t *testing.T) {
	for _, v := range loadVectors(t) {
		if v.Error != "" || v.Encoding != "json" || v.Struct == "DumpRecord" {
			continue
		}
		keys := topLevelKeys(t, v.BytesHex)
		for _, u := range v.UnsetFields {
			if slices.Contains(keys, u) {
				t.Errorf("%s: UNSET field %q was written", v.Name, u)
			}
		}
		for _, it := range fixtureFields(t, v.Fields) {
			if !slices.Contains(keys, it.Key.(string)) {
				t.Errorf("%s: field %q missing", v.Name, it.Key)
			}
		}
	}
}

func topLevelKeys(t *testing.T, hexText string) []string {
	data, _ := hex.DecodeString(hexText)
	v, err := DecodeValue(JSON, data)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range v.(Map) {
		keys = append(keys, it.Key.(string))
	}
	return keys
}
