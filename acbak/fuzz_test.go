package acbak

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// FuzzReader feeds arbitrary bytes to the frame reader, strict and lenient,
// with and without a known size. It must never panic, every error must be
// an *Error naming an offset inside the input, and the frames it accepts
// must lie inside the input.
func FuzzReader(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(testfixtures.Dir(f), "bad", "*.acbak"))
	seeds = append(seeds, testfixtures.Path(f, "small.acbak"), testfixtures.Path(f, "blobs.acbak"))
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if len(data) < 64<<10 {
			f.Add(uint8(0), data)
		}
	}
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		opts := Options{Lenient: mode&1 != 0, KeepUnknown: mode&2 != 0, MaxFrame: 1 << 20}
		if mode&4 != 0 {
			opts.Size = int64(len(data))
		}
		r := NewReader(bytes.NewReader(data), opts)
		for fr, err := range r.All() {
			if err != nil {
				var ae *Error
				if !errors.As(err, &ae) || ae.Offset < 0 || ae.Offset > int64(len(data)) {
					t.Fatalf("error %v lacks an offset inside the %d-byte input", err, len(data))
				}
				return
			}
			if fr.Offset+4+int64(len(fr.Payload)) > int64(len(data)) {
				t.Fatalf("frame %d claims bytes beyond the input", fr.Index)
			}
		}
		if r.Offset() > int64(len(data)) {
			t.Fatalf("reader consumed %d of %d bytes", r.Offset(), len(data))
		}
	})
}
