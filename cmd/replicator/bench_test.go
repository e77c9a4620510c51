package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/synth"
	"github.com/specstar/replicator/stream"
)

// The pipeline benchmarks share one generated archive: 100,000 revisions
// (10,000 resources x 10) with 1 KiB JSON payloads.
const benchRevisions = 100_000

func writeArchive(path string, resources int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	if _, err := synth.Write(w, synth.Spec{Models: 1, Resources: resources, RevisionsPerResource: 10, PayloadSize: 1024, Encoding: events.JSON, Seed: 7}); err != nil {
		return err
	}
	return w.Flush()
}

var benchArchive = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "pipeline-bench")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bench.acbak")
	return path, writeArchive(path, benchRevisions/10)
})

func benchInput(b *testing.B) (string, int64) {
	path, err := benchArchive()
	if err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, st.Size()
}

func report(b *testing.B, bytes int64) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(benchRevisions/sec, "revisions/s")
	b.ReportMetric(float64(bytes)/sec/1e6, "MB/s")
}

// BenchmarkPipelineDisk: our whole pipeline, `replicator mirror`: replay
// onto an embedded JetStream server, consume, apply to the disk sink with
// every file synced, ack.
func BenchmarkPipelineDisk(b *testing.B) {
	archive, size := benchInput(b)
	for b.Loop() {
		dir := b.TempDir()
		var out, errs bytes.Buffer
		if code := run(context.Background(), []string{"mirror", "--from", archive, "--to", "disk:" + dir + "?sync=file", "--data-dir", b.TempDir()}, &out, &errs); code != exitOK {
			b.Fatalf("mirror: %d %s %s", code, out.String(), errs.String())
		}
	}
	report(b, size)
}

// BenchmarkPipelineDiskSyncBatch is the same job with the disk sink's
// sync=batch (mirror's default): one syncfs per batch instead of an fsync
// per file.
func BenchmarkPipelineDiskSyncBatch(b *testing.B) {
	archive, size := benchInput(b)
	for b.Loop() {
		dir := b.TempDir()
		var out, errs bytes.Buffer
		if code := run(context.Background(), []string{"mirror", "--from", archive, "--to", "disk:" + dir + "?sync=batch", "--data-dir", b.TempDir()}, &out, &errs); code != exitOK {
			b.Fatalf("mirror: %d %s %s", code, out.String(), errs.String())
		}
	}
	report(b, size)
}

// BenchmarkRawJetStream is baseline (a): the same frame payloads published
// asynchronously to a stream on the same embedded server and consumed
// through a durable pull consumer with explicit acks, with none of our
// decoding or writing.
func BenchmarkRawJetStream(b *testing.B) {
	archive, size := benchInput(b)
	data, err := os.ReadFile(archive)
	if err != nil {
		b.Fatal(err)
	}
	var payloads [][]byte
	for f, err := range acbak.NewReader(bytes.NewReader(data), acbak.Options{}).All() {
		if err != nil {
			b.Fatal(err)
		}
		payloads = append(payloads, f.Payload)
	}
	ctx := context.Background()
	for b.Loop() {
		bus, err := stream.Open(ctx, stream.Config{DataDir: b.TempDir()}, quietLog())
		if err != nil {
			b.Fatal(err)
		}
		js, _ := jetstream.New(bus.NC, jetstream.WithPublishAsyncMaxPending(512))
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage})
		if err != nil {
			b.Fatal(err)
		}
		for i, p := range payloads {
			m := nats.NewMsg("raw.x")
			m.Header.Set("Nats-Msg-Id", fmt.Sprint(i))
			m.Data = p
			if _, err := js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4096})
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for got < len(payloads) {
			batch, err := c.Fetch(256, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			var last jetstream.Msg
			for m := range batch.Messages() {
				got++
				if last != nil {
					last.Ack()
				}
				last = m
			}
			if last != nil {
				last.DoubleAck(ctx)
			}
		}
		bus.Close()
	}
	report(b, size)
}

// BenchmarkDirectDisk is baseline (b): the same store files written
// straight to disk with the same durability protocol as the sink (temp
// file, fsync, rename per file; the new directories synced) and the same
// concurrency (16 writers per batch of 256 revisions), without JetStream
// or decoding on the way (payloads and infos are prepared beforehand).
func BenchmarkDirectDisk(b *testing.B) {
	archive, size := benchInput(b)
	data, err := os.ReadFile(archive)
	if err != nil {
		b.Fatal(err)
	}
	var revs []directRev
	for f, err := range acbak.NewReader(bytes.NewReader(data), acbak.Options{}).All() {
		if err != nil {
			b.Fatal(err)
		}
		if rr, ok := f.Record.(*events.RevisionRecord); ok {
			res, _ := rr.Resource()
			info, _ := res.Info.Encode(events.JSON)
			revs = append(revs, directRev{res.Info.UID, res.Info.ResourceID, res.Info.RevisionID, info, res.RawData})
		}
	}
	for b.Loop() {
		if err := writeDurably(filepath.Join(b.TempDir(), "model0", "data"), revs); err != nil {
			b.Fatal(err)
		}
	}
	report(b, size)
}

// directRev is one revision as BenchmarkDirectDisk writes it.
type directRev struct {
	uid, rid, revID string
	info, data      []byte
}

// writeDurably is BenchmarkDirectDisk's baseline: the store files and
// index entries of revs written below root (a model's data directory)
// with the sink's sync=file durability (temp file, fsync, rename per
// file; the new directories synced), 16 writers per batch of 256.
func writeDurably(root string, revs []directRev) error {
	writeFile := func(path string, p []byte) error {
		tmp := path + ".tmp"
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		f.Write(p)
		f.Sync()
		f.Close()
		return os.Rename(tmp, path)
	}
	syncDir := func(p string) {
		if d, err := os.Open(p); err == nil {
			d.Sync()
			d.Close()
		}
	}
	var failed atomic.Bool
	for start := 0; start < len(revs); start += 256 {
		batch := revs[start:min(start+256, len(revs))]
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, r := range batch {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				store := filepath.Join(root, "store", r.uid)
				idx := filepath.Join(root, "resource", r.rid, r.revID, "no_ver")
				os.MkdirAll(store, 0o755)
				os.MkdirAll(idx, 0o755)
				if writeFile(filepath.Join(store, "data"), r.data) != nil ||
					writeFile(filepath.Join(store, "info"), r.info) != nil {
					failed.Store(true)
					return
				}
				syncDir(store)
				syncDir(filepath.Dir(store))
				if writeFile(filepath.Join(idx, "uid"), []byte(r.uid)) != nil {
					failed.Store(true)
				}
			}()
		}
		wg.Wait()
		for _, r := range batch { // the index directories, once per batch
			idx := filepath.Join(root, "resource", r.rid, r.revID, "no_ver")
			syncDir(idx)
			syncDir(filepath.Dir(idx))
		}
	}
	if failed.Load() {
		return errors.New("a write failed")
	}
	return nil
}

// BenchmarkMirrorPeakRSS runs the built replicator binary's mirror on
// archives of 25,000 and 100,000 revisions and reports the peak resident
// set of each: it must not grow with the archive.
func BenchmarkMirrorPeakRSS(b *testing.B) {
	dir := b.TempDir()
	bin := buildReplicator(b)
	sizes := []int{2500, 10000}
	paths := make([]string, len(sizes))
	for i, n := range sizes {
		paths[i] = filepath.Join(dir, fmt.Sprintf("a%d.acbak", n))
		if err := writeArchive(paths[i], n); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		for i, n := range sizes {
			cmd := exec.Command(bin, "mirror", "--from", paths[i], "--to", b.TempDir(), "--data-dir", b.TempDir())
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			// ru_maxrss of a child started from this (large) test process
			// counts the parent's pages before exec, so read the exec'd
			// image's own high-water mark (VmHWM) while it runs.
			hwm := int64(0)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
		poll:
			for {
				if kb := vmHWM(cmd.Process.Pid); kb > hwm {
					hwm = kb
				}
				select {
				case err := <-done:
					if err != nil {
						b.Fatalf("mirror: %v", err)
					}
					break poll
				case <-time.After(20 * time.Millisecond):
				}
			}
			b.ReportMetric(float64(hwm)/1024, fmt.Sprintf("MiB-peak-RSS-%drevs", n*10))
		}
	}
}

// vmHWM reads a process's peak resident set (kB) from /proc.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}
