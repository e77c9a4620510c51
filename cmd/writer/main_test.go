package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

var golden = []string{
	"small.acbak", "medium.acbak", "blobs.acbak", "msgpack.acbak",
	"disk-layout/factory-json.acbak", "disk-layout/factory-msgpack.acbak", "disk-layout/sqlite-msgpack.acbak",
}

func runWriter(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestVerifyGolden: every archive the reference implementation wrote
// verifies, with no errors.
func TestVerifyGolden(t *testing.T) {
	for _, name := range golden {
		code, out, errs := runWriter(t, "verify", testfixtures.Path(t, name))
		if code != exitOK || !strings.Contains(out, ": valid:") || strings.Contains(out, "error:") {
			t.Errorf("%s: exit %d\n%s%s", name, code, out, errs)
		}
	}
}

// TestVerifyBad: each negative fixture gets the verdict bad/expect.json
// gives, strict and lenient, and every rejection names frame and offset.
func TestVerifyBad(t *testing.T) {
	var exp []struct {
		File          string `json:"file"`
		Verify        string `json:"verify"`
		VerifyLenient string `json:"verify_lenient"`
	}
	if err := json.Unmarshal(testfixtures.Read(t, "bad", "expect.json"), &exp); err != nil {
		t.Fatal(err)
	}
	for _, e := range exp {
		for _, mode := range []struct {
			flag []string
			want string
		}{{nil, e.Verify}, {[]string{"--lenient"}, e.VerifyLenient}} {
			args := append([]string{"verify", testfixtures.Path(t, "bad", e.File)}, mode.flag...)
			code, out, errs := runWriter(t, args...)
			wantCode := exitOK
			if mode.want == "reject" {
				wantCode = exitInvalid
			}
			if code != wantCode {
				t.Errorf("%s %v: exit %d, want %d\n%s%s", e.File, mode.flag, code, wantCode, out, errs)
				continue
			}
			if wantCode == exitInvalid {
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					if strings.HasPrefix(line, "error: ") && !strings.Contains(line, "frame ") {
						t.Errorf("%s: problem line without frame/offset: %q", e.File, line)
					}
				}
				if !strings.Contains(out, "error: frame ") {
					t.Errorf("%s: no problem line:\n%s", e.File, out)
				}
			}
		}
	}
}

// TestInspectJSON compares `inspect --json` with what the fixtures'
// expect.json files say about each archive.
func TestInspectJSON(t *testing.T) {
	for _, name := range golden {
		t.Run(name, func(t *testing.T) {
			code, out, errs := runWriter(t, "inspect", testfixtures.Path(t, name), "--json")
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var got struct {
				Version int64          `json:"version"`
				Frames  int            `json:"frames"`
				Bytes   int64          `json:"bytes"`
				Records map[string]int `json:"records"`
				Models  []struct {
					Name           string   `json:"name"`
					Metas          int      `json:"metas"`
					Revisions      int      `json:"revisions"`
					Blobs          int      `json:"blobs"`
					BlobBytes      int64    `json:"blob_bytes"`
					SchemaVersions []string `json:"schema_versions"`
					Encodings      []string `json:"payload_encodings"`
				} `json:"models"`
			}
			dec := json.NewDecoder(strings.NewReader(out))
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, out)
			}
			if dec.More() {
				t.Fatalf("more than one JSON value in output")
			}
			var exp struct {
				Size         int64          `json:"size"`
				RecordCounts map[string]int `json:"record_counts"`
				Models       map[string]struct {
					Encoding       string            `json:"encoding"`
					SchemaVersions map[string]string `json:"schema_versions"`
				} `json:"models"`
				Records []struct {
					Tag       string `json:"tag"`
					ModelName string `json:"model_name"`
					BlobLen   int64  `json:"blob_len"`
					Info      *struct {
						SchemaVersion *string `json:"schema_version"`
					} `json:"info"`
					RawEnc string `json:"raw_data_encoding"`
				} `json:"records"`
			}
			if err := json.Unmarshal(testfixtures.Read(t, strings.TrimSuffix(name, ".acbak")+".expect.json"), &exp); err != nil {
				t.Fatal(err)
			}
			if got.Version != 2 || got.Frames != len(exp.Records) || got.Bytes != exp.Size {
				t.Fatalf("version/frames/bytes = %d/%d/%d, want 2/%d/%d", got.Version, got.Frames, got.Bytes, len(exp.Records), exp.Size)
			}
			if !mapsEqual(got.Records, exp.RecordCounts) {
				t.Fatalf("records %v, want %v", got.Records, exp.RecordCounts)
			}
			// Tally the fixture's records per model section.
			type tally struct {
				metas, revs, blobs int
				blobBytes          int64
				svs, encs          []string
			}
			want := map[string]*tally{}
			var order []string
			var cur *tally
			for _, r := range exp.Records {
				switch r.Tag {
				case "ModelStartRecord":
					cur = &tally{}
					want[r.ModelName] = cur
					order = append(order, r.ModelName)
				case "MetaRecord":
					cur.metas++
				case "RevisionRecord":
					cur.revs++
					sv := "null"
					if r.Info.SchemaVersion != nil {
						sv = *r.Info.SchemaVersion
					}
					if !slices.Contains(cur.svs, sv) {
						cur.svs = append(cur.svs, sv)
					}
					if !slices.Contains(cur.encs, r.RawEnc) {
						cur.encs = append(cur.encs, r.RawEnc)
					}
				case "BlobRecord":
					cur.blobs++
					cur.blobBytes += r.BlobLen
				}
			}
			if len(got.Models) != len(order) {
				t.Fatalf("%d models, want %v", len(got.Models), order)
			}
			for i, m := range got.Models {
				w := want[order[i]]
				if m.Name != order[i] || m.Metas != w.metas || m.Revisions != w.revs || m.Blobs != w.blobs || m.BlobBytes != w.blobBytes {
					t.Errorf("model %d = %+v, want %s %+v", i, m, order[i], *w)
				}
				sort.Strings(m.SchemaVersions)
				sort.Strings(w.svs)
				if !slices.Equal(m.SchemaVersions, w.svs) || !slices.Equal(m.Encodings, w.encs) {
					t.Errorf("model %s: schema versions %v encodings %v, want %v %v", m.Name, m.SchemaVersions, m.Encodings, w.svs, w.encs)
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// rewrite copies a fixture archive through the Writer, letting edit
// replace records, and returns the new file's path.
func rewrite(t *testing.T, name string, edit func(i int, rec events.Record) events.Record) string {
	t.Helper()
	data := testfixtures.Read(t, name)
	r := acbak.NewReader(bytes.NewReader(data), acbak.Options{KeepUnknown: true})
	var out bytes.Buffer
	w := acbak.NewWriter(&out)
	for f, err := range r.All() {
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(edit(f.Index, f.Record)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "edited.acbak")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVerifyFindsDamage: damage a user would want caught is reported with
// exit status 1 and a line naming the problem.
func TestVerifyFindsDamage(t *testing.T) {
	tests := []struct {
		name    string
		archive string
		edit    func(i int, rec events.Record) events.Record
		want    string
	}{
		{"blob bytes changed", "blobs.acbak", func(i int, rec events.Record) events.Record {
			if b, ok := rec.(*events.BlobRecord); ok && len(b.BlobData) > 0 {
				c := *b
				c.BlobData = bytes.Clone(b.BlobData)
				c.BlobData[0] ^= 1
				return &c
			}
			return rec
		}, "file_id mismatch"},
		{"blob size wrong", "blobs.acbak", func(i int, rec events.Record) events.Record {
			if b, ok := rec.(*events.BlobRecord); ok {
				c := *b
				c.Size++
				return &c
			}
			return rec
		}, "size is"},
		{"payload changed under its data_hash", "small.acbak", func(i int, rec events.Record) events.Record {
			if rr, ok := rec.(*events.RevisionRecord); ok && i == 3 {
				res, err := rr.Resource()
				if err != nil {
					t.Fatal(err)
				}
				res.RawData = append(bytes.Clone(res.RawData[:len(res.RawData)-1]), ' ', '}')
				data, err := res.Encode(events.Msgpack)
				if err != nil {
					t.Fatal(err)
				}
				return &events.RevisionRecord{Data: data}
			}
			return rec
		}, "data_hash mismatch"},
		{"meta data not msgpack", "small.acbak", func(i int, rec events.Record) events.Record {
			if _, ok := rec.(*events.MetaRecord); ok && i == 2 {
				return &events.MetaRecord{Data: []byte{0xc1}}
			}
			return rec
		}, "not a valid ResourceMeta"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := rewrite(t, tc.archive, tc.edit)
			code, out, _ := runWriter(t, "verify", path)
			if code != exitInvalid || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want 1 with %q:\n%s", code, tc.want, out)
			}
		})
	}
}

// TestVerifyNonCanonical: a record whose bytes are valid msgpack but not
// msgspec's canonical form (here the header's version as uint8 cc02
// instead of fixint 02) is reported.
func TestVerifyNonCanonical(t *testing.T) {
	data := bytes.Clone(testfixtures.Read(t, "small.acbak"))
	hdr := []byte("\xa7version\x02")
	i := bytes.Index(data, hdr)
	if i < 0 {
		t.Fatal("header not found")
	}
	patched := append(append(append([]byte{}, data[:i]...), "\xa7version\xcc\x02"...), data[i+len(hdr):]...)
	patched[3]++ // the header frame grew by one byte
	path := filepath.Join(t.TempDir(), "noncanonical.acbak")
	if err := os.WriteFile(path, patched, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runWriter(t, "verify", path)
	if code != exitInvalid || !strings.Contains(out, "frame 0 at offset 0: HeaderRecord re-encodes to different bytes") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"verify"}, {"verify", "a", "b"}, {"inspect", "--bogus", "x"}} {
		if code, _, _ := runWriter(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, _ := runWriter(t, "verify", filepath.Join(t.TempDir(), "missing.acbak")); code != exitInvalid {
		t.Errorf("missing file: exit %d, want 1", code)
	}
}
