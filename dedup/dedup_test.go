package dedup

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestAgainstReferenceHashes checks our hashes against the ones the Python
// xxhash library recorded in the fixtures.
func TestAgainstReferenceHashes(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty blob (fixtures README 3.6)", nil, "99aa06d3014798d86001c324468d497f"},
	}
	// Every blob fixture of blobs.acbak with its bytes inline.
	var exp struct {
		Records []struct {
			Tag     string  `json:"tag"`
			FileID  string  `json:"file_id"`
			BlobHex *string `json:"blob_hex"`
			IsXXH3  bool    `json:"file_id_is_xxh3_128_of_blob"`
		} `json:"records"`
	}
	if err := json.Unmarshal(testfixtures.Read(t, "blobs.expect.json"), &exp); err != nil {
		t.Fatal(err)
	}
	for _, r := range exp.Records {
		if r.Tag == "BlobRecord" && r.BlobHex != nil && r.IsXXH3 {
			b, err := hex.DecodeString(*r.BlobHex)
			if err != nil {
				t.Fatal(err)
			}
			cases = append(cases, struct {
				name string
				data []byte
				want string
			}{"blob " + r.FileID, b, r.FileID})
		}
	}
	if len(cases) < 3 {
		t.Fatalf("expected blob fixtures with inline bytes, found %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FileID(c.data); got != c.want {
				t.Fatalf("FileID = %s, want %s", got, c.want)
			}
			if err := CheckBlob(c.want, int64(len(c.data)), c.data); err != nil {
				t.Fatal(err)
			}
			h := NewFileIDHasher()
			for i := range c.data { // byte at a time: streaming must agree
				h.Write(c.data[i : i+1])
			}
			if got := HexSum(h); got != c.want {
				t.Fatalf("streaming FileID = %s, want %s", got, c.want)
			}
		})
	}
}

// TestDataHashVectors checks data_hash against the payload vectors, whose
// data_hash the reference implementation computed.
func TestDataHashVectors(t *testing.T) {
	var vs []struct {
		Name     string `json:"name"`
		BytesHex string `json:"bytes_hex"`
		DataHash string `json:"data_hash"`
	}
	if err := json.Unmarshal(testfixtures.Read(t, "vectors.json"), &vs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range vs {
		if v.DataHash == "" {
			continue
		}
		n++
		p, _ := hex.DecodeString(v.BytesHex)
		if got := DataHash(p); got != v.DataHash {
			t.Errorf("%s: DataHash = %s, want %s", v.Name, got, v.DataHash)
		}
	}
	if n == 0 {
		t.Fatal("no vectors carry a data_hash")
	}
}

func TestChecks(t *testing.T) {
	blob := []byte("hello")
	id := FileID(blob)
	tests := []struct {
		name     string
		err      error
		mismatch bool
	}{
		{"good blob", CheckBlob(id, 5, blob), false},
		{"wrong size", CheckBlob(id, 4, blob), false},
		{"wrong bytes", CheckBlob(id, 5, []byte("hellp")), true},
		{"good payload", CheckDataHash(DataHash(blob), blob), false},
		{"bad payload", CheckDataHash(DataHash(blob), bytes.ToUpper(blob)), true},
	}
	for _, tc := range tests {
		var m *MismatchError
		if got := errors.As(tc.err, &m); got != tc.mismatch {
			t.Errorf("%s: mismatch=%v, err=%v", tc.name, got, tc.err)
		}
	}
	if CheckBlob(id, 4, blob) == nil {
		t.Error("wrong size accepted")
	}
	if !ValidDataHash(DataHash(blob)) || ValidDataHash("xxh3_128:XYZ") || !ValidFileID(id) || ValidFileID("../etc/passwd") {
		t.Error("shape checks wrong")
	}
}
