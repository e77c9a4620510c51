package disk

import (
	"os"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/fsprobe"
)

// BenchmarkCreateAfterDelete (issue 22) measures what the file system
// under TMPDIR charges, in system CPU, to create an inode (a directory
// holding one small file, the shape of store/{uid}/data) on a quiet tree,
// and again right after 40,000 other inodes beside it were deleted, as a
// test's or a benchmark's cleanup does. ext4 without a journal (this
// project's machines) skips, one by one, every free inode deleted in the
// last minute or more before it hands out a new one (see fsprobe), so
// there the second figure is several times the first for minutes; with a
// journal, or on tmpfs, they are about equal. Its deletions slow whatever
// runs after it on the same file system: run it alone, and last. It logs
// the file system and whether it has a journal.
func BenchmarkCreateAfterDelete(b *testing.B) {
	root := b.TempDir()
	b.Logf("file system under %s: %s", root, fsprobe.Describe(root))
	const victims, probe = 20000, 2000 // directories, each with one file
	var fresh, after time.Duration
	for i := 0; b.Loop(); i++ {
		var err error
		if fresh, _, err = fsprobe.Cost(root, probe); err != nil {
			b.Fatal(err)
		}
		_, dead, err := fsprobe.Cost(root, victims)
		if err != nil {
			b.Fatal(err)
		}
		if err := syncFS(root); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dead); err != nil {
			b.Fatal(err)
		}
		// ext4 counts an inode as recently deleted from the second after
		// its deletion time (whole seconds) on.
		time.Sleep(1100 * time.Millisecond)
		if after, _, err = fsprobe.Cost(root, probe); err != nil {
			b.Fatal(err)
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	b.ReportMetric(us(fresh), "fresh-sys-us/inode")
	b.ReportMetric(us(after), "after-delete-sys-us/inode")
	b.ReportMetric(us(after)/us(fresh), "after/fresh")
}
