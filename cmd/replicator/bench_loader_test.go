package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/fsprobe"
	"github.com/specstar/replicator/internal/testsupport/synth"
)

// loaderArchive is shaped like the archive of the performance issue:
// 48,000 revisions of 6,000 resources in 3 models, ~1.4 KiB payloads,
// written once per run.
var loaderArchive = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "loader-bench")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "loader.acbak")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = synth.Write(f, synth.Spec{Models: 3, Resources: 2000, RevisionsPerResource: 8, PayloadSize: 1400, Encoding: events.JSON, Seed: 11})
	return path, err
})

// loaderItem is what SpecStar's loader writes for one record.
type loaderItem struct {
	model, rid, revID, uid string
	meta, info, data       []byte
}

// loaderBatch and loaderParallel are the replicator's defaults (256 events
// a batch, 16 at once), which the stand-ins below write with.
const (
	loaderBatch    = 256
	loaderParallel = 16
)

// loadLikeSpecStar is the Go stand-in for SpecStar's own `load` of an
// archive into its disk factory: it reads the archive, decodes each
// record and encodes what the disk stores write (RevisionInfo and
// ResourceMeta in JSON), as the loader must, and writes each batch of
// loaderBatch records with writeLikeSpecStar before it reads the next
// (SpecStar's loader decodes and writes in one loop).
func loadLikeSpecStar(root, archive string) (revisions int, err error) {
	f, err := os.Open(archive)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	batch := make([]loaderItem, 0, loaderBatch)
	revisions, err = decodeForLoader(bufio.NewReaderSize(f, 1<<20), func(it loaderItem) error {
		if batch = append(batch, it); len(batch) < loaderBatch {
			return nil
		}
		err := writeLikeSpecStar(root, batch)
		batch = batch[:0]
		return err
	})
	if err == nil {
		err = writeLikeSpecStar(root, batch)
	}
	return revisions, err
}

// decodeForLoader reads an archive into what SpecStar's loader writes,
// handing each record's files to emit, and counts its revisions.
func decodeForLoader(r io.Reader, emit func(loaderItem) error) (revisions int, err error) {
	model := ""
	for f, err := range acbak.NewReader(r, acbak.Options{}).All() {
		if err != nil {
			return revisions, err
		}
		var it loaderItem
		switch r := f.Record.(type) {
		case *events.ModelStartRecord:
			model = r.ModelName
			continue
		case *events.MetaRecord:
			m, err := r.Meta()
			if err != nil {
				return revisions, err
			}
			enc, err := m.Encode(events.JSON)
			if err != nil {
				return revisions, err
			}
			it = loaderItem{model: model, rid: m.ResourceID, meta: enc}
		case *events.RevisionRecord:
			res, err := r.Resource()
			if err != nil {
				return revisions, err
			}
			info, err := res.Info.Encode(events.JSON)
			if err != nil {
				return revisions, err
			}
			it = loaderItem{model: model, rid: res.Info.ResourceID, revID: res.Info.RevisionID, uid: res.Info.UID, info: info, data: res.RawData}
			revisions++
		default:
			continue
		}
		if err := emit(it); err != nil {
			return revisions, err
		}
	}
	return revisions, nil
}

// writeLikeSpecStar writes the tree SpecStar's own `load` writes into its
// disk factory, the way it writes it (upstream facts: per revision mkdir
// store/{uid}, mkdir the index entry's parent, the index entry, then data
// and info; per meta its .data file): plain writes, no temp files, no
// renames, no fsync. The index entry is the contract's uid-file form, as
// our sink writes it; loaderParallel at a time, in batches of
// loaderBatch, as the replicator.
func writeLikeSpecStar(root string, items []loaderItem) error {
	var firstErr error
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	for start := 0; start < len(items); start += loaderBatch {
		batch := items[start:min(start+loaderBatch, len(items))]
		var wg sync.WaitGroup
		sem := make(chan struct{}, loaderParallel)
		for _, it := range batch {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if it.meta != nil {
					dir := filepath.Join(root, it.model, "meta")
					os.MkdirAll(dir, 0o755)
					if err := os.WriteFile(filepath.Join(dir, it.rid+".data"), it.meta, 0o644); err != nil {
						fail(err)
					}
					return
				}
				data := filepath.Join(root, it.model, "data")
				store := filepath.Join(data, "store", it.uid)
				slot := filepath.Join(data, "resource", it.rid, it.revID, "no_ver")
				os.MkdirAll(store, 0o755)
				os.MkdirAll(slot, 0o755)
				for _, w := range []struct {
					path string
					b    []byte
				}{{filepath.Join(slot, "uid"), []byte(it.uid)}, {filepath.Join(store, "data"), it.data}, {filepath.Join(store, "info"), it.info}} {
					if err := os.WriteFile(w.path, w.b, 0o644); err != nil {
						fail(err)
					}
				}
			}()
		}
		wg.Wait()
	}
	return firstErr
}

// keptTrees holds the trees the loader benchmarks write, removed only
// when the test binary's temporary directory is (testmain): on ext4
// without a journal (the project's machine) inode allocation skips inodes
// freed in the last minutes (recently_deleted), which made any side
// running after a removed tree two to six times slower.
var keptTrees = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "loader-trees") })

// keptTree is a new directory under keptTrees.
func keptTree(b *testing.B) string {
	b.Helper()
	root, err := keptTrees()
	if err == nil {
		root, err = os.MkdirTemp(root, "tree")
	}
	if err != nil {
		b.Fatal(err)
	}
	return root
}

// settleDisk writes back every dirty page before a timed side starts, so
// that neither side pays for the other's writeback: the loader stand-in
// never syncs, and the mirror's syncfs would otherwise also flush the
// loader's tree (on the project's machine a mirror run right after the
// loader took up to a third longer).
func settleDisk() { syscall.Sync() }

// loaderItemsOf reads an archive into what writeLikeSpecStar writes,
// outside any timing, and counts its revisions.
func loaderItemsOf(b *testing.B, archive string) (items []loaderItem, revisions int) {
	b.Helper()
	raw, err := os.ReadFile(archive)
	if err != nil {
		b.Fatal(err)
	}
	revisions, err = decodeForLoader(bytes.NewReader(raw), func(it loaderItem) error {
		items = append(items, it)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return items, revisions
}

// benchSide is one side of a same-run comparison: run writes a tree under
// root and says how long the part that counts took.
type benchSide struct {
	name string
	run  func(root string) (time.Duration, error)
}

// timed is a side whose whole run counts.
func timed(name string, run func(root string) error) benchSide {
	return benchSide{name, func(root string) (time.Duration, error) {
		start := time.Now()
		err := run(root)
		return time.Since(start), err
	}}
}

// systemCPU is the system CPU used so far by this process and by the
// children it has waited for (a side is either).
func systemCPU(b *testing.B) time.Duration {
	var self, children syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children); err != nil {
		b.Fatal(err)
	}
	return time.Duration(self.Stime.Nano() + children.Stime.Nano())
}

// takeTurns runs every side once per iteration, each into a kept tree
// after a settleDisk, the first side changing from one iteration to the
// next (each side leaves a tree behind, which slows the next), and
// returns each side's total time.
//
// Before each side it probes what creating an inode costs the file system
// (fsprobe, into the kept trees) and logs it with the side's own system
// CPU; the probes' mean is reported as fs-create-sys-us/inode. The probe's
// thousand inodes land in one or two of ext4's block groups, so it
// understates what a tree of hundreds of thousands meets after a deletion;
// the side's system CPU is the direct figure.
func takeTurns(b *testing.B, sides []benchSide) []time.Duration {
	b.Helper()
	kept, err := keptTrees()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("trees under %s: %s", kept, fsprobe.Describe(kept))
	took := make([]time.Duration, len(sides))
	var probed time.Duration
	probes := 0
	for i := 0; b.Loop(); i++ {
		for j := range sides {
			k := (i + j) % len(sides)
			settleDisk()
			cost, _, err := fsprobe.Cost(kept, 500)
			if err != nil {
				b.Fatal(err)
			}
			probed, probes = probed+cost, probes+1
			sysBefore := systemCPU(b)
			d, err := sides[k].run(keptTree(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("iteration %d, %s: %.2fs, %.2fs of system CPU (an inode cost the file system %.0f µs of system CPU just before)",
				i+1, sides[k].name, d.Seconds(), (systemCPU(b) - sysBefore).Seconds(), float64(cost.Nanoseconds())/1000)
			took[k] += d
		}
	}
	b.ReportMetric(float64(probed.Nanoseconds())/1000/float64(probes), "fs-create-sys-us/inode")
	return took
}

// BenchmarkMirrorVsSpecStarLoader times, in each iteration and on the same
// archive, baselines and `replicator mirror` into a disk tree, one
// sub-benchmark per sync mode, and reports each one's revisions/s and the
// mirror's speed as a ratio of each baseline's. For sync=batch the
// baseline is the Go stand-in for SpecStar's loader (loadLikeSpecStar,
// which reads the archive as the loader does: goal 1 of the performance
// issue asks for at least 0.9), reported beside the same writes from
// records decoded before the clock starts (writeLikeSpecStar: "writes");
// for sync=file it is the bare write with the same durability
// (writeDurably, as BenchmarkDirectDisk: goal 2, at least 0.9). The sides
// take turns at going first, as each one leaves a tree on the disk.
func BenchmarkMirrorVsSpecStarLoader(b *testing.B) {
	archive, err := loaderArchive()
	if err != nil {
		b.Fatal(err)
	}
	items, revisions := loaderItemsOf(b, archive)
	var durable []directRev
	for _, it := range items {
		if it.meta == nil {
			durable = append(durable, directRev{it.uid, it.rid, it.revID, it.info, it.data})
		}
	}
	load := timed("loader", func(root string) error {
		n, err := loadLikeSpecStar(root, archive)
		if err == nil && n != revisions {
			err = fmt.Errorf("loader stand-in wrote %d revisions, want %d", n, revisions)
		}
		return err
	})
	writes := timed("writes", func(root string) error { return writeLikeSpecStar(root, items) })
	// The durable baseline writes the revisions only; the mirror writes
	// the metas too, at its own cost.
	durably := timed("durable", func(root string) error { return writeDurably(filepath.Join(root, "model0", "data"), durable) })
	for _, mode := range []struct {
		name, opt string
		bases     []benchSide
	}{
		{"sync=batch", "?sync=batch", []benchSide{load, writes}},
		{"sync=file", "?sync=file", []benchSide{durably}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			bin := buildReplicator(b)
			mirror := timed("mirror", func(root string) error {
				// The built binary: in this process the mirror's soft memory
				// limit would also have to hold the items above.
				out, err := exec.Command(bin, "mirror", "--from", archive, "--to", "disk:"+root+mode.opt, "--data-dir", b.TempDir()).CombinedOutput()
				if err != nil {
					return fmt.Errorf("mirror: %v %s", err, out)
				}
				return nil
			})
			sides := append([]benchSide{mirror}, mode.bases...)
			took := takeTurns(b, sides)
			rate := func(d time.Duration) float64 { return float64(revisions*b.N) / d.Seconds() }
			for k, s := range sides {
				b.ReportMetric(rate(took[k]), s.name+"-revs/s")
				if k > 0 {
					b.ReportMetric(took[k].Seconds()/took[0].Seconds(), "mirror/"+s.name)
				}
			}
		})
	}
}

// BenchmarkMirrorVsSpecStarItself times, in each iteration and on the
// loader archive, SpecStar's own `load` into its disk factory (the real
// Python code, through testdata/specstar_load.py, which counts only the
// load call itself: not Python's start nor its imports) and the built
// `replicator mirror` (the whole process) into a disk tree with its
// default durability (sync=batch), in the contract's uid-file index and
// in the symlink index SpecStar's DiskResourceStore writes. The sides take
// turns at going first. SpecStar cannot be installed by this repository
// (it is not on the registries this project reaches): set
// SPECSTAR_PYTHON to a Python 3.12+ that imports autocrud (PYTHONPATH
// passes through), or the benchmark is skipped, saying so.
func BenchmarkMirrorVsSpecStarItself(b *testing.B) {
	python := os.Getenv("SPECSTAR_PYTHON")
	if python == "" {
		b.Skip("SPECSTAR_PYTHON is not set: it names a Python that can import SpecStar (autocrud)")
	}
	archive, err := loaderArchive()
	if err != nil {
		b.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "specstar_load.py"))
	if err != nil {
		b.Fatal(err)
	}
	_, revisions := loaderItemsOf(b, archive)
	bin := buildReplicator(b)
	mirror := func(name, query string) benchSide {
		return timed(name, func(root string) error {
			out, err := exec.Command(bin, "mirror", "--from", archive, "--to", "disk:"+root+query, "--data-dir", b.TempDir()).CombinedOutput()
			if err != nil {
				return fmt.Errorf("mirror: %v %s", err, out)
			}
			return nil
		})
	}
	verified := false
	sides := []benchSide{
		{"specstar", func(root string) (time.Duration, error) {
			out, err := exec.Command(python, script, archive, root, "model0,model1,model2").Output()
			if err != nil {
				return 0, fmt.Errorf("SpecStar's load: %v", err)
			}
			lines := strings.Fields(string(out))
			if len(lines) == 0 {
				return 0, fmt.Errorf("SpecStar's load printed nothing")
			}
			secs, err := strconv.ParseFloat(lines[len(lines)-1], 64)
			if err != nil {
				return 0, fmt.Errorf("SpecStar's load printed %q", out)
			}
			if !verified {
				// What SpecStar wrote is what the mirror writes: the same
				// records, read back by our verify.
				if out, err := exec.Command(bin, "verify", "--from", archive, "--to", "disk:"+root).CombinedOutput(); err != nil {
					return 0, fmt.Errorf("verify SpecStar's tree: %v %s", err, out)
				}
				verified = true
			}
			return time.Duration(secs * float64(time.Second)), nil
		}},
		mirror("mirror", ""),
		mirror("mirror-symlink", "?index=symlink"),
	}
	took := takeTurns(b, sides)
	for k, s := range sides {
		b.ReportMetric(float64(revisions*b.N)/took[k].Seconds(), s.name+"-revs/s")
		if k > 0 {
			b.ReportMetric(took[0].Seconds()/took[k].Seconds(), s.name+"/specstar")
		}
	}
}
