package disk

// Reading a disk tree as a source: which meta store each model has, and
// the revisions stored for a resource.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// sqliteMeta reports whether model's metas are in {model}/meta.db: as the
// meta= option says, or, read-only with DetectMeta, as the tree holds them
// (meta.db without a meta/ directory), so that a tree is read whichever
// way SpecStar wrote it. A writer keeps to the option: its metas are not
// looked for on every write.
func (d *Sink) sqliteMeta(model string) bool {
	if !d.opts.DetectMeta || d.opts.SQLiteMeta || !d.opts.ReadOnly {
		return d.opts.SQLiteMeta
	}
	dir := filepath.Join(d.root, model)
	if _, err := os.Stat(filepath.Join(dir, "meta")); err == nil {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, "meta.db"))
	return err == nil
}

// RevisionKey names one stored revision of a resource.
type RevisionKey struct {
	RevisionID    string
	SchemaVersion events.Opt[string]
}

// Revisions lists the revisions stored for a resource (the index entries
// below {model}/data/resource/{id}), ordered by revision id then schema
// version, so that a tree can be read back as an archive. None is not an
// error.
func (d *Sink) Revisions(ctx context.Context, model, resourceID string) ([]RevisionKey, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	if err := store.CheckModel(model); err != nil {
		return nil, err
	}
	if err := store.CheckResourceID(resourceID); err != nil {
		return nil, err
	}
	dir := filepath.Join(d.root, model, "data", "resource", resourceID)
	revs, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sink: revisions of %s: %w", dir, err)
	}
	var keys []RevisionKey
	for _, r := range revs {
		if !r.IsDir() {
			continue
		}
		schemas, err := os.ReadDir(filepath.Join(dir, r.Name()))
		if err != nil {
			return nil, fmt.Errorf("sink: revisions of %s: %w", dir, err)
		}
		for _, s := range schemas {
			k := RevisionKey{RevisionID: r.Name()}
			switch name := s.Name(); {
			case name == "no_ver":
			case strings.HasPrefix(name, "v_"):
				k.SchemaVersion = events.Some(strings.TrimPrefix(name, "v_"))
			default:
				continue // not an index entry
			}
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.RevisionID != b.RevisionID {
			return revisionLess(a.RevisionID, b.RevisionID)
		}
		return a.SchemaVersion.Value < b.SchemaVersion.Value
	})
	return keys, nil
}

// revisionLess orders "{id}:{n}" revision ids by n where both have one.
func revisionLess(a, b string) bool {
	ia, ib := strings.LastIndexByte(a, ':'), strings.LastIndexByte(b, ':')
	if ia >= 0 && ib >= 0 && a[:ia] == b[:ib] {
		na, nb := a[ia+1:], b[ib+1:]
		if len(na) != len(nb) {
			return len(na) < len(nb)
		}
		return na < nb
	}
	return a < b
}
