package disk_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the driver "sqlite", to read meta.db's rows

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
		Dump: func(t *testing.T, s sink.Sink) string {
			return dumpTree(t, s.(*disk.Sink).Root())
		},
	}
}

// dumpTree lists every entry below root but the staging directory: a
// directory's path, a symlink's target, a file's bytes, and the rows of
// a meta.db (whose pages and change counter depend on how its rows were
// written, not only on which).
func dumpTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		switch {
		case e.IsDir() && rel == ".specstar-tmp":
			return filepath.SkipDir
		case e.IsDir():
			fmt.Fprintf(&b, "d %s\n", rel)
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "l %s -> %s\n", rel, target)
		case e.Name() == "meta.db":
			fmt.Fprintf(&b, "f %s rows:\n%s", rel, dumpMetaDB(t, p))
		case strings.HasPrefix(e.Name(), "meta.db-"):
			// its journal or WAL, part of the rows above
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "f %s %x\n", rel, data)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dump %s: %v", root, err)
	}
	return b.String()
}

// dumpMetaDB lists the rows of a meta.db's resource_meta table in
// resource_id order.
func dumpMetaDB(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+url.PathEscape(path)+"?mode=ro")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT * FROM resource_meta ORDER BY resource_id`)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		for i, c := range cols {
			fmt.Fprintf(&b, " %s=%#v", c, vals[i])
		}
		b.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b.String()
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
