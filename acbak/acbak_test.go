package acbak

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// goldenArchives are the valid archives the reference implementation wrote,
// each with its NAME.expect.json.
var goldenArchives = []string{
	"small.acbak", "medium.acbak", "blobs.acbak", "msgpack.acbak",
	"disk-layout/factory-json.acbak", "disk-layout/factory-msgpack.acbak", "disk-layout/sqlite-msgpack.acbak",
}

type expectRecord struct {
	Index  int    `json:"index"`
	Offset int64  `json:"offset"`
	Length int    `json:"length"`
	Tag    string `json:"tag"`
}

func readAll(t *testing.T, data []byte, opts Options) ([]*Frame, *Reader, error) {
	t.Helper()
	r := NewReader(bytes.NewReader(data), opts)
	var frames []*Frame
	for f, err := range r.All() {
		if err != nil {
			return frames, r, err
		}
		frames = append(frames, f)
	}
	return frames, r, nil
}

// TestGoldenArchives reads every reference archive, checks each frame's
// index, offset, length and tag against the fixture's description, checks
// that every record re-encodes to its exact payload, and that the Writer
// reproduces the whole file byte for byte.
func TestGoldenArchives(t *testing.T) {
	for _, name := range goldenArchives {
		t.Run(name, func(t *testing.T) {
			data := testfixtures.Read(t, name)
			var exp struct {
				Records []expectRecord `json:"records"`
			}
			if err := json.Unmarshal(testfixtures.Read(t, strings.TrimSuffix(name, ".acbak")+".expect.json"), &exp); err != nil {
				t.Fatal(err)
			}
			frames, r, err := readAll(t, data, Options{Size: int64(len(data))})
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if len(r.Warnings()) != 0 || len(r.Unknown()) != 0 {
				t.Fatalf("unexpected warnings %v / unknown %v", r.Warnings(), r.Unknown())
			}
			if len(frames) != len(exp.Records) {
				t.Fatalf("read %d frames, fixture lists %d", len(frames), len(exp.Records))
			}
			var out bytes.Buffer
			w := NewWriter(&out)
			for i, f := range frames {
				e := exp.Records[i]
				if f.Index != e.Index || f.Offset != e.Offset || len(f.Payload) != e.Length || f.Record.Tag() != e.Tag {
					t.Fatalf("frame %d: got (%d, %d, %d, %s), fixture (%d, %d, %d, %s)", i,
						f.Index, f.Offset, len(f.Payload), f.Record.Tag(), e.Index, e.Offset, e.Length, e.Tag)
				}
				re, err := f.Record.Encode(events.Msgpack)
				if err != nil {
					t.Fatalf("frame %d: re-encode: %v", i, err)
				}
				if !bytes.Equal(re, f.Payload) {
					t.Fatalf("frame %d (%s): re-encoded bytes differ\n got %x\nwant %x", i, e.Tag, re, f.Payload)
				}
				if err := w.Write(f.Record); err != nil {
					t.Fatalf("write frame %d: %v", i, err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), data) {
				t.Fatalf("writer output (%d bytes) differs from the reference archive (%d bytes)", out.Len(), len(data))
			}
		})
	}
}

// TestBadArchives checks each negative fixture against bad/expect.json and
// the kind of error bad/README.md describes, in strict and lenient mode.
func TestBadArchives(t *testing.T) {
	var exp []struct {
		File          string `json:"file"`
		Verify        string `json:"verify"`
		VerifyLenient string `json:"verify_lenient"`
	}
	if err := json.Unmarshal(testfixtures.Read(t, "bad", "expect.json"), &exp); err != nil {
		t.Fatal(err)
	}
	// What the reader itself must say; bad_inner_meta's fault is inside a
	// MetaRecord's data, which `writer verify` decodes (tested there).
	kinds := map[string]error{
		"truncated_header.acbak":     ErrTruncatedHeader,
		"truncated_payload.acbak":    ErrTruncatedPayload,
		"header_version3.acbak":      ErrUnsupportedVersion,
		"record_outside_model.acbak": ErrOutsideModel,
		"huge_length.acbak":          ErrTruncatedPayload,
		"first_not_header.acbak":     ErrFirstNotHeader,
		"empty.acbak":                ErrEmpty,
		"missing_eof.acbak":          ErrMissingEOF,
		"trailing_garbage.acbak":     ErrAfterEOF,
		"model_end_mismatch.acbak":   ErrModelEndMismatch,
	}
	decodeMsgs := map[string]string{
		"not_msgpack.acbak":     "expected object, got int",
		"payload_not_map.acbak": "expected object, got array",
		"missing_tag.acbak":     "missing required field `t`",
	}
	if len(exp) != 16 {
		t.Fatalf("bad/expect.json lists %d files, want 16", len(exp))
	}
	for _, e := range exp {
		for _, lenient := range []bool{false, true} {
			want := e.Verify
			if lenient {
				want = e.VerifyLenient
			}
			if e.File == "bad_inner_meta.acbak" {
				want = "accept" // see above
			}
			t.Run(e.File+map[bool]string{false: "/strict", true: "/lenient"}[lenient], func(t *testing.T) {
				data := testfixtures.Read(t, "bad", e.File)
				_, r, err := readAll(t, data, Options{Size: int64(len(data)), Lenient: lenient})
				if want == "accept" {
					if err != nil {
						t.Fatalf("rejected: %v", err)
					}
					kind := kinds[e.File]
					if kind != nil && !lenient {
						t.Fatalf("strict mode accepted a file with %v", kind)
					}
					if kind != nil && !hasWarning(r.Warnings(), kind) {
						t.Fatalf("lenient mode accepted without a %q warning: %v", kind, r.Warnings())
					}
					if e.File == "unknown_tag.acbak" && r.Unknown()["FutureRecord"] != 1 {
						t.Fatalf("unknown tags counted %v, want FutureRecord: 1", r.Unknown())
					}
					return
				}
				if err == nil {
					t.Fatal("accepted, want rejection")
				}
				var ae *Error
				if !errors.As(err, &ae) || ae.Offset < 0 || ae.Offset > int64(len(data)) {
					t.Fatalf("error %v does not name a frame and offset inside the file", err)
				}
				if !strings.Contains(err.Error(), "frame ") || !strings.Contains(err.Error(), " at offset ") {
					t.Fatalf("error text %q lacks frame index and offset", err)
				}
				if kind, ok := kinds[e.File]; ok && !errors.Is(err, kind) {
					t.Fatalf("error %v, want kind %v", err, kind)
				}
				if msg, ok := decodeMsgs[e.File]; ok && !strings.Contains(err.Error(), msg) {
					t.Fatalf("error %v, want it to say %q", err, msg)
				}
			})
		}
	}
}

func hasWarning(ws []Warning, kind error) bool {
	for _, w := range ws {
		if errors.Is(&w, kind) {
			return true
		}
	}
	return false
}

// TestHugeLengthDoesNotAllocate reads huge_length.acbak (a 0xFFFFFFFF
// length prefix with 13 bytes behind it) from a plain stream whose size is
// unknown, with the frame limit lifted: the reader must report truncation
// having allocated about what the file holds, not 4 GiB.
func TestHugeLengthDoesNotAllocate(t *testing.T) {
	data := testfixtures.Read(t, "bad", "huge_length.acbak")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := readAll(t, data, Options{MaxFrame: 1 << 40})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTruncatedPayload) {
		t.Fatalf("got %v, want truncation", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Fatalf("allocated %d bytes for a %d-byte file", grew, len(data))
	}
	// With the default limit the declared length is refused outright.
	_, _, err = readAll(t, data, Options{})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want the frame limit error", err)
	}
}

// TestWriterRefusesBadOrder: the writer never produces what the reader
// would reject.
func TestWriterRefusesBadOrder(t *testing.T) {
	tests := []struct {
		name string
		recs []events.Record
		want error
	}{
		{"no header", []events.Record{&events.ModelStartRecord{ModelName: "a"}}, ErrFirstNotHeader},
		{"meta outside model", []events.Record{&events.HeaderRecord{Version: 2}, &events.MetaRecord{Data: []byte{0x80}}}, ErrOutsideModel},
		{"nested model", []events.Record{&events.HeaderRecord{Version: 2}, &events.ModelStartRecord{ModelName: "a"}, &events.ModelStartRecord{ModelName: "b"}}, ErrBadNesting},
		{"version 3", []events.Record{&events.HeaderRecord{Version: 3}}, ErrUnsupportedVersion},
	}
	for _, tc := range tests {
		w := NewWriter(io.Discard)
		var err error
		for _, r := range tc.recs {
			if err = w.Write(r); err != nil {
				break
			}
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	w := NewWriter(io.Discard)
	_ = w.Write(&events.HeaderRecord{Version: 2})
	if err := w.Close(); !errors.Is(err, ErrMissingEOF) {
		t.Errorf("Close without Eof: got %v", err)
	}
}

// TestReaderFromFile reads through an *os.File as the CLI does.
func TestReaderFromFile(t *testing.T) {
	f, err := os.Open(testfixtures.Path(t, "small.acbak"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	r := NewReader(f, Options{Size: st.Size()})
	n := 0
	for _, err := range r.All() {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 22 || r.Offset() != st.Size() {
		t.Fatalf("read %d frames ending at %d; want 22 frames ending at %d", n, r.Offset(), st.Size())
	}
}
