package acbak_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/synth"
)

// benchArchive is a generated archive of 200,000 revisions (20,000
// resources x 10 revisions, ~300-byte JSON payloads), written once per run.
var benchArchive = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "acbak-bench")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bench.acbak")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	if _, err := synth.Write(w, synth.Spec{Models: 1, Resources: 20000, RevisionsPerResource: 10, PayloadSize: 300, Encoding: events.JSON, Seed: 1}); err != nil {
		return "", err
	}
	return path, w.Flush()
})

func loadBench(b *testing.B) ([]byte, int) {
	path, err := benchArchive()
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return data, 200000
}

// BenchmarkVerify measures the full `writer verify` pass.
func BenchmarkVerify(b *testing.B) {
	data, revs := loadBench(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		res, err := acbak.Verify(context.Background(), bytes.NewReader(data), acbak.Options{Size: int64(len(data))}, func(p acbak.Problem) { b.Fatal(p) }, nil)
		if err != nil || !res.Valid() {
			b.Fatalf("%v %+v", err, res)
		}
	}
	b.ReportMetric(float64(revs)*float64(b.N)/b.Elapsed().Seconds(), "revisions/s")
}

// BenchmarkRead measures the Reader alone: framing, record decoding and
// the order checks, without Verify's inner decoding and hashing.
func BenchmarkRead(b *testing.B) {
	data, revs := loadBench(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		r := acbak.NewReader(bytes.NewReader(data), acbak.Options{Size: int64(len(data))})
		for _, err := range r.All() {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(revs)*float64(b.N)/b.Elapsed().Seconds(), "revisions/s")
}

// BenchmarkFrameOnly is the baseline: the same archive only split into
// frames (length prefix + payload copied into a fresh buffer), nothing
// decoded or checked.
func BenchmarkFrameOnly(b *testing.B) {
	data, revs := loadBench(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		br := bufio.NewReaderSize(bytes.NewReader(data), 64<<10)
		var hdr [4]byte
		for {
			if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
			p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
			if _, err := io.ReadFull(br, p); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(revs)*float64(b.N)/b.Elapsed().Seconds(), "revisions/s")
}
