package events

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestBinaryRefsMatchTheReference: in blobs.acbak and msgpack.acbak the
// reference implementation put, per model, exactly the blobs its payloads
// reference; finding them generically in the payloads must give the same
// set.
func TestBinaryRefsMatchTheReference(t *testing.T) {
	for _, name := range []string{"blobs.acbak", "msgpack.acbak", "small.acbak"} {
		t.Run(name, func(t *testing.T) {
			data := testfixtures.Read(t, name)
			refs := map[string][]string{}  // model -> referenced file_ids
			blobs := map[string][]string{} // model -> BlobRecord file_ids
			model := ""
			for len(data) >= 4 {
				n := int(binary.BigEndian.Uint32(data))
				rec, err := DecodeRecord(Msgpack, data[4:4+n])
				data = data[4+n:]
				if err != nil {
					t.Fatal(err)
				}
				switch r := rec.(type) {
				case *ModelStartRecord:
					model = r.ModelName
				case *RevisionRecord:
					res, err := r.Resource()
					if err != nil {
						t.Fatal(err)
					}
					found, err := PayloadBinaryRefs(res.RawData)
					if err != nil {
						t.Fatalf("%s: %v", res.Info.RevisionID, err)
					}
					for _, f := range found {
						if !slices.Contains(refs[model], f.FileID) {
							refs[model] = append(refs[model], f.FileID)
						}
					}
				case *BlobRecord:
					blobs[model] = append(blobs[model], r.FileID)
				}
			}
			for m := range refs {
				slices.Sort(refs[m])
			}
			for m := range blobs {
				slices.Sort(blobs[m])
			}
			models := map[string]bool{}
			for m := range refs {
				models[m] = true
			}
			for m := range blobs {
				models[m] = true
			}
			for m := range models {
				if !slices.Equal(refs[m], blobs[m]) {
					t.Errorf("model %s: payloads reference %v, archive carries %v", m, refs[m], blobs[m])
				}
			}
			if name != "small.acbak" && len(blobs) == 0 {
				t.Fatal("expected BlobRecords in this archive")
			}
		})
	}
}

func TestBinaryRefsShapes(t *testing.T) {
	id := "a6cd5e9392000f6ac44bdff4074eecdb"
	tests := []struct {
		name string
		v    Value
		want int
	}{
		{"file_id and size", Map{{"file_id", id}, {"size", int64(1)}}, 1},
		{"file_id and content_type", Map{{"file_id", id}, {"content_type", "text/plain"}}, 1},
		{"nested in a list in a struct", Struct{Fields: []StructField{{"files", []any{Map{{"file_id", id}, {"size", int64(1)}}}}}}, 1},
		{"twice", []any{Map{{"file_id", id}, {"size", int64(1)}}, Map{{"file_id", id}, {"size", int64(1)}}}, 1},
		{"file_id alone is not a Binary", Map{{"file_id", id}}, 0},
		{"not 32 hex", Map{{"file_id", "x"}, {"size", int64(1)}}, 0},
		{"upper-case hex", Map{{"file_id", "A6CD5E9392000F6AC44BDFF4074EECDB"}, {"size", int64(1)}}, 0},
	}
	for _, tc := range tests {
		if got := BinaryRefs(tc.v); len(got) != tc.want {
			t.Errorf("%s: %d refs, want %d", tc.name, len(got), tc.want)
		}
	}
}
