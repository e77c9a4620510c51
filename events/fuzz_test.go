package events

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// Fuzz targets for every decoder. Each checks that no input panics, and
// that whatever decodes re-encodes to a canonical form that is stable:
// decode(encode(v)) encodes to the same bytes again.

// seedVectors adds the vectors of one struct type and encoding as seeds.
func seedVectors(f *testing.F, structName string, enc Encoding, withEnc bool) {
	for _, v := range loadVectorsF(f) {
		if v.Struct != structName || v.Encoding != enc.String() || v.BytesHex == "" {
			continue
		}
		b, _ := hex.DecodeString(v.BytesHex)
		if withEnc {
			f.Add(uint8(enc), b)
		} else {
			f.Add(b)
		}
	}
}

func loadVectorsF(f *testing.F) []vector {
	var vs []vector
	data, err := os.ReadFile(testfixtures.Path(f, "vectors.json"))
	if err != nil {
		f.Fatal(err)
	}
	if err := json.Unmarshal(data, &vs); err != nil {
		f.Fatal(err)
	}
	return vs
}

// archivePayloads returns the frame payloads of a fixture archive.
func archivePayloads(f *testing.F, name string) [][]byte {
	data, err := os.ReadFile(testfixtures.Path(f, name))
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for len(data) >= 4 {
		n := int(binary.BigEndian.Uint32(data))
		if n > len(data)-4 {
			break
		}
		out = append(out, data[4:4+n])
		data = data[4+n:]
	}
	return out
}

func stable(t *testing.T, what string, first []byte, decode func([]byte) ([]byte, error)) {
	second, err := decode(first)
	if err != nil {
		t.Fatalf("%s: re-decoding our own encoding failed: %v\n%x", what, err, first)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("%s: encoding not stable\n first %x\nsecond %x", what, first, second)
	}
}

// encoder is what every decoded struct and record can do.
type encoder interface {
	Encode(Encoding) ([]byte, error)
}

func roundTrip[T encoder](dec func(Encoding, []byte) (T, error)) func(*testing.T, uint8, []byte) {
	return func(t *testing.T, e uint8, data []byte) {
		enc := Encoding(e % 2)
		v, err := dec(enc, data)
		if err != nil {
			return
		}
		first, err := v.Encode(enc)
		if err != nil {
			return // e.g. a dict with keys of mixed types: msgspec refuses too
		}
		stable(t, "struct", first, func(b []byte) ([]byte, error) {
			v2, err := dec(enc, b)
			if err != nil {
				return nil, err
			}
			return v2.Encode(enc)
		})
		// Converting to the other encoding must not panic either.
		_, _ = v.Encode(1 - enc)
	}
}

func FuzzDecodeRevisionInfo(f *testing.F) {
	seedVectors(f, "RevisionInfo", Msgpack, true)
	seedVectors(f, "RevisionInfo", JSON, true)
	f.Fuzz(roundTrip(DecodeRevisionInfo))
}

func FuzzDecodeResourceMeta(f *testing.F) {
	seedVectors(f, "ResourceMeta", Msgpack, true)
	seedVectors(f, "ResourceMeta", JSON, true)
	f.Fuzz(roundTrip(DecodeResourceMeta))
}

func FuzzDecodeRawResource(f *testing.F) {
	seedVectors(f, "RawResource", Msgpack, true)
	seedVectors(f, "RawResource", JSON, true)
	f.Fuzz(roundTrip(DecodeRawResource))
}

func FuzzDecodeBinary(f *testing.F) {
	seedVectors(f, "Binary", Msgpack, true)
	seedVectors(f, "Binary", JSON, true)
	f.Fuzz(roundTrip(DecodeBinary))
}

func FuzzDecodeRecord(f *testing.F) {
	seedVectors(f, "DumpRecord", Msgpack, true)
	for _, p := range archivePayloads(f, "small.acbak") {
		f.Add(uint8(Msgpack), p)
	}
	f.Fuzz(roundTrip(DecodeRecord))
}

func FuzzDecodeValue(f *testing.F) {
	seedVectors(f, "IssueData", Msgpack, true)
	seedVectors(f, "IssueData", JSON, true)
	seedVectors(f, "ResourceMeta", JSON, true)
	f.Fuzz(func(t *testing.T, e uint8, data []byte) {
		enc := Encoding(e % 2)
		v, err := DecodeValue(enc, data)
		if err != nil {
			return
		}
		first, err := EncodeValue(enc, v)
		if err != nil {
			return
		}
		stable(t, "value", first, func(b []byte) ([]byte, error) {
			v2, err := DecodeValue(enc, b)
			if err != nil {
				return nil, err
			}
			return EncodeValue(enc, v2)
		})
	})
}

// FuzzParseTime: any string either fails or formats back to a string that
// parses to the same instant and naivety.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2024-01-02T03:04:05.123456Z", "2024-01-02T11:04:05+08:00", "2024-07-02T10:11:12", "0001-01-01T00:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := ParseTime(s)
		if err != nil {
			return
		}
		back, err := ParseTime(tm.Format())
		if err != nil {
			t.Fatalf("%q formats to %q, which does not parse: %v", s, tm.Format(), err)
		}
		if back.Naive != tm.Naive || !back.Time.Truncate(1000).Equal(tm.Time.Truncate(1000)) {
			t.Fatalf("%q -> %q -> %v", s, tm.Format(), back)
		}
	})
}

// FuzzDecodeOwnRecords covers our own additive tags, BlobRefRecord,
// RecordRefRecord and PurgeRecord, and the generic Binary reference finder.
func FuzzDecodeOwnRecords(f *testing.F) {
	ref, _ := (&BlobRefRecord{FileID: "64d2f845e7abbc3eaffacd9148e270be", Size: 70000, Bucket: "SPECSTAR_BLOBS"}).Encode(Msgpack)
	purge, _ := (&PurgeRecord{ResourceID: "issue:1", PurgedTime: Time{Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}}).Encode(Msgpack)
	rref, _ := (&RecordRefRecord{RecordTag: TagRevision, Object: RecordObjectName([]byte("x")), Size: 1, Bucket: "SPECSTAR_BLOBS"}).Encode(Msgpack)
	f.Add(ref)
	f.Add(rref)
	f.Add(purge)
	f.Add([]byte(`{"file":{"file_id":"a6cd5e9392000f6ac44bdff4074eecdb","size":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := DecodeBlobRef(data); err == nil {
			first, err := r.Encode(Msgpack)
			if err == nil {
				stable(t, "BlobRefRecord", first, func(b []byte) ([]byte, error) {
					r2, err := DecodeBlobRef(b)
					if err != nil {
						return nil, err
					}
					return r2.Encode(Msgpack)
				})
			}
		}
		if r, err := DecodeRecordRef(data); err == nil {
			first, err := r.Encode(Msgpack)
			if err == nil {
				stable(t, "RecordRefRecord", first, func(b []byte) ([]byte, error) {
					r2, err := DecodeRecordRef(b)
					if err != nil {
						return nil, err
					}
					return r2.Encode(Msgpack)
				})
			}
		}
		if p, err := DecodePurge(data); err == nil {
			first, err := p.Encode(Msgpack)
			if err == nil {
				stable(t, "PurgeRecord", first, func(b []byte) ([]byte, error) {
					p2, err := DecodePurge(b)
					if err != nil {
						return nil, err
					}
					return p2.Encode(Msgpack)
				})
			}
		}
		_, _ = PayloadBinaryRefs(data)
	})
}
