package disk

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkBatchDurability (issue 22, goal 1) compares the two ways a
// batch of new files can be made durable before its ack: one syncfs of
// the file system (sync=batch), and an fdatasync of each file (32 at a
// time) then an fsync of each directory, which flushes only the batch's
// own files. A batch is 20 resource directories of 40 files of 600 bytes
// (about 270 revisions' files), and another goroutine dirties a 256 MiB
// file at about 4 MB/s meanwhile, as Postgres and JetStream do beside the
// mirror on one file system. It reports each way's p50, p90 and max per
// batch; run with -benchtime 20x.
func BenchmarkBatchDurability(b *testing.B) {
	root := b.TempDir()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		dirtyBeside(filepath.Join(root, "dirty.bin"), stop)
	}()
	defer func() { close(stop); wg.Wait() }()
	for _, mode := range []string{"syncfs", "fdatasync-each"} {
		b.Run(mode, func(b *testing.B) {
			var took []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				files, dirs := newBatch(b, filepath.Join(root, fmt.Sprintf("%s-%d", mode, i)))
				b.StartTimer()
				t := time.Now()
				if mode == "syncfs" {
					if err := syncFS(root); err != nil {
						b.Fatal(err)
					}
				} else if err := syncEach(files, dirs); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(t))
			}
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
			b.ReportMetric(ms(took[len(took)*9/10]), "p90-ms")
			b.ReportMetric(ms(took[len(took)-1]), "max-ms")
		})
	}
}

// newBatch writes a batch's files under dir, none synced.
func newBatch(b *testing.B, dir string) (files, dirs []string) {
	for r := 0; r < 20; r++ {
		d := filepath.Join(dir, fmt.Sprintf("res%d", r))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, d)
		for i := 0; i < 40; i++ {
			p := filepath.Join(d, fmt.Sprintf("f%d", i))
			if err := os.WriteFile(p, make([]byte, 600), 0o644); err != nil {
				b.Fatal(err)
			}
			files = append(files, p)
		}
	}
	return files, append(dirs, dir)
}

// syncEach fdatasyncs files, 32 at a time, then fsyncs dirs.
func syncEach(files, dirs []string) error {
	ch := make(chan string)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range ch {
				f, err := os.Open(p)
				if err == nil {
					err = unix.Fdatasync(int(f.Fd()))
					f.Close()
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, p := range files {
		ch <- p
	}
	close(ch)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// dirtyBeside writes 8 KiB every 2 ms across a 256 MiB file until stop.
func dirtyBeside(path string, stop chan struct{}) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	buf := make([]byte, 8192)
	var off int64
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		_, _ = f.WriteAt(buf, off)
		off = (off + 1<<20 + 8192) % (256 << 20)
	}
}
