package disk

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// TestBlobStreamedBytes: a streamed blob file is byte for byte what
// events.Binary.Encode writes (and so what DiskBlobStore writes), at every
// bin header width boundary, with and without content_type.
func TestBlobStreamedBytes(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 255, 256, 65535, 65536, 70000} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		id := dedup.FileID(data)
		for _, ct := range []string{"", "text/plain", "application/x-" + strings.Repeat("y", 40)} {
			for _, reader := range []struct {
				name string
				r    func() io.Reader
			}{
				{"plain", func() io.Reader { return bytes.NewReader(data) }},
				{"one byte at a time", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) }},
				{"data with EOF", func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) }},
			} {
				if size > 256 && reader.name == "one byte at a time" {
					continue
				}
				d := openDisk(t, t.TempDir(), Options{})
				out, err := d.ApplyBlob(ctx, id, int64(size), ct, reader.r())
				if err != nil || out != store.Written {
					t.Fatalf("size %d %q %s: %v %v", size, ct, reader.name, out, err)
				}
				bin := events.Binary{FileID: events.Some(id), Size: events.Some(int64(size)), Data: events.Some(data)}
				if ct != "" {
					bin.ContentType = events.Some(ct)
				}
				want, err := bin.Encode(events.Msgpack)
				if err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(d.Root(), store.BlobsDir, id))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					n := min(len(got), len(want), 80)
					t.Errorf("size %d %q %s: file differs from Binary.Encode\n got % x\nwant % x", size, ct, reader.name, got[:n], want[:n])
				}
				if out, err := d.ApplyBlob(ctx, id, int64(size), ct, iotest.ErrReader(errors.New("must not be read"))); err != nil || out != store.Unchanged {
					t.Errorf("size %d: second apply %v %v", size, out, err)
				}
			}
		}
	}
}

// TestBlobRefused: bytes that do not match the file_id or the size leave no
// file, temporary or not; a failing reader is a transient error.
func TestBlobRefused(t *testing.T) {
	ctx := context.Background()
	good := []byte("hello blob")
	id := dedup.FileID(good)
	for _, c := range []struct {
		name    string
		size    int64
		r       io.Reader
		invalid bool
	}{
		{"wrong bytes", int64(len(good)), strings.NewReader("hello blub"), true},
		{"short", int64(len(good)) + 1, bytes.NewReader(good), true},
		{"long", int64(len(good)) - 1, bytes.NewReader(good), true},
		{"long by one beyond size", int64(len(good)), io.MultiReader(bytes.NewReader(good), strings.NewReader("!")), true},
		{"empty", int64(len(good)), strings.NewReader(""), true},
		{"reader fails", int64(len(good)), io.MultiReader(bytes.NewReader(good[:4]), iotest.ErrReader(errors.New("connection reset"))), false},
		{"too large for msgpack", 1 << 32, bytes.NewReader(good), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := openDisk(t, t.TempDir(), Options{})
			out, err := d.ApplyBlob(ctx, id, c.size, "", c.r)
			if err == nil {
				t.Fatalf("accepted: %v", out)
			}
			if store.IsInvalid(err) != c.invalid {
				t.Errorf("IsInvalid=%v for %v", store.IsInvalid(err), err)
			}
			entries, _ := os.ReadDir(filepath.Join(d.Root(), store.BlobsDir))
			for _, e := range entries {
				t.Errorf("left behind: %s", e.Name())
			}
			// The right bytes are still accepted afterwards.
			if out, err := d.ApplyBlob(ctx, id, int64(len(good)), "", bytes.NewReader(good)); err != nil || out != store.Written {
				t.Errorf("good blob afterwards: %v %v", out, err)
			}
		})
	}
	// A cancelled context stops the copy and leaves nothing.
	d := openDisk(t, t.TempDir(), Options{})
	cctx, cancel := context.WithCancel(ctx)
	r := &cancelAfter{r: bytes.NewReader(make([]byte, 1<<20)), n: 3, cancel: cancel}
	if _, err := d.ApplyBlob(cctx, dedup.FileID(make([]byte, 1<<20)), 1<<20, "", r); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(d.Root(), store.BlobsDir))
	if len(entries) != 0 {
		t.Errorf("left behind after cancel: %v", entries)
	}
}

// cancelAfter cancels its context after n reads.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return c.r.Read(p[:min(len(p), 4096)])
}

// genReader yields n pseudo-random bytes without holding them.
type genReader struct {
	rng *rand.Rand
	n   int64
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.n {
		p = p[:g.n]
	}
	for i := range p {
		p[i] = byte(g.rng.Uint32())
	}
	g.n -= int64(len(p))
	return len(p), nil
}

// TestBlobLargeBoundedMemory streams a 48 MiB blob: what is allocated meanwhile
// does not depend on its size, and it reads back intact.
func TestBlobLargeBoundedMemory(t *testing.T) {
	const size = 48 << 20
	gen := func() io.Reader { return &genReader{rng: rand.New(rand.NewPCG(7, 9)), n: size} }
	h := dedup.NewFileIDHasher()
	if _, err := io.Copy(h, gen()); err != nil {
		t.Fatal(err)
	}
	id := dedup.HexSum(h)
	ctx := context.Background()
	d := openDisk(t, t.TempDir(), Options{})

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out, err := d.ApplyBlob(ctx, id, size, "application/octet-stream", gen())
	runtime.ReadMemStats(&after)
	if err != nil || out != store.Written {
		t.Fatalf("%v %v", out, err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("streaming %d bytes allocated %d bytes", size, alloc)
	if alloc > 4<<20 {
		t.Errorf("streaming %d bytes allocated %d bytes", size, alloc)
	}

	bin, rc, err := d.OpenBlob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if bin.Size != events.Some(int64(size)) || bin.ContentType != events.Some("application/octet-stream") {
		t.Errorf("header read back: %+v", bin)
	}
	h2 := dedup.NewFileIDHasher()
	n, err := io.Copy(h2, rc)
	if err != nil || n != size || dedup.HexSum(h2) != id {
		t.Errorf("data read back: %d bytes, %v, id %s", n, err, dedup.HexSum(h2))
	}
}
