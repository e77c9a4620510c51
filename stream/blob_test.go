package stream

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"
)

// A sink that consumes a large blob slowly (an upload to S3) must still
// read it whole: nats.go bounds an object read by its 5 s request timeout
// when the context has none, which made such blobs fail on every attempt.
func TestSlowBlobReadCompletes(t *testing.T) {
	ctx := context.Background()
	bus, err := Open(ctx, Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("embedded JetStream: %v", err)
	}
	defer bus.Close()
	data := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	pub := bus.NewPublisher(8)
	if err := pub.PutBlob(ctx, "slowblob", data); err != nil {
		t.Fatal(err)
	}
	r, err := bus.OpenBlob(ctx, bus.BlobBucket(), "slowblob")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// About 7 s for the whole blob (24 chunks): longer than nats.go's default timeout.
	var got bytes.Buffer
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the blob after %d bytes: %v", got.Len(), err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read %d bytes, not the %d stored", got.Len(), len(data))
	}
}
