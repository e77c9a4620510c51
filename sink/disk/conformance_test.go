package disk_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/sinktest"
)

// TestConformance runs the sink conformance suite against the disk sink,
// with meta files and with meta.db. (An external test package: the root
// sink package, which the suite uses, imports this one.)
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		opts disk.Options
	}{
		{"default", disk.Options{}},
		{"meta=sqlite", disk.Options{SQLiteMeta: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sinktest.Run(t, diskBackend(c.opts))
		})
	}
}

// diskBackend is the disk sink with opts, each Open on a new root below a
// parent of its own holding nothing else but a sibling directory, so
// that a refused record escaping the root would show.
func diskBackend(opts disk.Options) sinktest.Backend {
	open := func(t *testing.T, root string) sink.Sink {
		t.Helper()
		d, err := disk.Open(context.Background(), root, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	return sinktest.Backend{
		Open: func(t *testing.T) sink.Sink {
			parent := t.TempDir()
			if err := os.MkdirAll(filepath.Join(parent, "sibling", "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			return open(t, filepath.Join(parent, "root"))
		},
		Reopen: func(t *testing.T, s sink.Sink) sink.Sink {
			disk.Crash(s.(*disk.Sink)) // s is abandoned as by a process that died
			return open(t, s.(*disk.Sink).Root())
		},
		Metas: true, Revisions: true, Blobs: true,
		PathMetaIDs: true, PathRevisionIDs: true,
		Outside: func(t *testing.T, s sink.Sink) string {
			root := s.(*disk.Sink).Root()
			return treeOutside(t, filepath.Dir(root), root)
		},
	}
}

// treeOutside lists every entry below parent but those below root.
func treeOutside(t *testing.T, parent, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(parent, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return filepath.SkipDir
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		b.WriteString(p + " " + info.Mode().String() + " " + info.ModTime().String() + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
