package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/specstar/replicator/sink/internal/sqlitemeta"
	"github.com/specstar/replicator/sink/internal/store"
)

// Models lists, in byte order, the models whose metas the sink holds: the
// directories below the root with a meta store ({model}/meta, or
// {model}/meta.db with SQLiteMeta), so that `replicator reconcile --prune`
// can walk everything the sink holds. The staging directory and _blobs are
// not models.
func (d *Sink) Models(ctx context.Context) ([]string, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(d.root) // sorted by name: byte order
	if err != nil {
		return nil, fmt.Errorf("sink: list models in %s: %w", d.root, err)
	}
	var models []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || store.CheckModel(name) != nil {
			continue
		}
		store := filepath.Join(d.root, name, "meta")
		if d.sqliteMeta(name) {
			store = filepath.Join(d.root, name, "meta.db")
		}
		if _, err := os.Stat(store); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("sink: list models: %w", err)
		}
		models = append(models, name)
	}
	return models, nil
}

// ResourceIDs yields, in byte order, the resource ids of the metas the sink
// holds for model (none if the model has no meta store), so that resources
// only the sink holds can be found. With SQLiteMeta the ids are read a
// page at a time (keyset on the primary key, whose BINARY collation is
// byte order), so memory does not grow with the table and no connection is
// held between pages. With .data files the directory has no order of its
// own: its names are read in chunks but then sorted, so memory holds one
// string per meta file of the model (as SpecStar's DiskMetaStore does when
// it lists them).
func (d *Sink) ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := d.check(ctx); err != nil {
			yield("", err)
			return
		}
		if err := store.CheckModel(model); err != nil {
			yield("", err)
			return
		}
		if d.sqliteMeta(model) {
			d.sqliteResourceIDs(ctx, model, yield)
			return
		}
		ids, err := d.fileResourceIDs(ctx, model)
		if err != nil {
			yield("", err)
			return
		}
		for _, id := range ids {
			if !yield(id, nil) {
				return
			}
		}
	}
}

// fileResourceIDs reads the ids of {model}/meta/*.data, sorted. Temporary
// files and anything that is not a regular file are not metas.
func (d *Sink) fileResourceIDs(ctx context.Context, model string) ([]string, error) {
	dir := filepath.Join(d.root, model, "meta")
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sink: list metas: %w", err)
	}
	defer f.Close()
	var ids []string
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		entries, err := f.ReadDir(store.ListPage)
		for _, e := range entries {
			name := e.Name()
			id, ok := strings.CutSuffix(name, store.MetaSuffix)
			if !ok || id == "" || strings.HasPrefix(name, store.TmpPrefix) || !e.Type().IsRegular() {
				continue
			}
			ids = append(ids, id)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("sink: list metas in %s: %w", dir, err)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// sqliteResourceIDs yields the resource_meta ids of model's meta.db a page
// at a time.
func (d *Sink) sqliteResourceIDs(ctx context.Context, model string, yield func(string, error) bool) {
	db, path, err := d.metaDB(ctx, model, false)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		yield("", err)
		return
	}
	after := ""
	for {
		page, err := sqlitemeta.Page(ctx, db, after)
		if err != nil {
			yield("", fmt.Errorf("sink: list metas in %s after %q: %w", path, after, err))
			return
		}
		for _, id := range page {
			if !yield(id, nil) {
				return
			}
		}
		if len(page) < store.ListPage {
			return
		}
		after = page[len(page)-1]
	}
}

// AllRevisions yields every revision index entry of the tree, model by
// model (every directory below the root with a data/resource directory,
// metas or not), resource by resource, so that a forced restore can find
// revisions no event wrote.
func (d *Sink) AllRevisions(ctx context.Context) iter.Seq2[store.RevisionRef, error] {
	return func(yield func(store.RevisionRef, error) bool) {
		if err := d.check(ctx); err != nil {
			yield(store.RevisionRef{}, err)
			return
		}
		models, err := os.ReadDir(d.root)
		if err != nil {
			yield(store.RevisionRef{}, fmt.Errorf("sink: list models in %s: %w", d.root, err))
			return
		}
		for _, m := range models {
			model := m.Name()
			if !m.IsDir() || strings.HasPrefix(model, ".") || store.CheckModel(model) != nil {
				continue
			}
			dir := filepath.Join(d.root, model, "data", "resource")
			resources, err := os.ReadDir(dir)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				yield(store.RevisionRef{}, fmt.Errorf("sink: list resources in %s: %w", dir, err))
				return
			}
			for _, r := range resources {
				if !r.IsDir() || store.CheckResourceID(r.Name()) != nil {
					continue
				}
				keys, err := d.Revisions(ctx, model, r.Name())
				if err != nil {
					yield(store.RevisionRef{}, err)
					return
				}
				for _, k := range keys {
					ref := store.RevisionRef{Model: model, ResourceID: r.Name(), RevisionID: k.RevisionID, SchemaVersion: k.SchemaVersion}
					if !yield(ref, nil) {
						return
					}
				}
			}
		}
	}
}

// BlobIDs yields the file ids of the blobs in {root}/_blobs (as their
// file names, which are the ids of every valid file_id).
func (d *Sink) BlobIDs(ctx context.Context) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := d.check(ctx); err != nil {
			yield("", err)
			return
		}
		dir := filepath.Join(d.root, store.BlobsDir)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err != nil {
			yield("", fmt.Errorf("sink: list blobs in %s: %w", dir, err))
			return
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), store.TmpPrefix) {
				continue
			}
			if !yield(e.Name(), nil) {
				return
			}
		}
	}
}
