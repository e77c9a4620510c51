package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// MarkDir is the directory below the root that holds one file per durable
// consumer that has written the tree (replicate.Marker): a tree that was
// wiped or replaced has lost it, and the consumer's position is then not
// trusted. Its leading dot keeps it out of the models' listing.
const MarkDir = ".specstar-replicator"

func (d *Sink) markPath(consumer string) string {
	return filepath.Join(d.root, MarkDir, url.PathEscape(consumer)+".consumer")
}

// Marked reports whether consumer has marked this tree.
func (d *Sink) Marked(ctx context.Context, consumer string) (bool, error) {
	_, err := os.Stat(d.markPath(consumer))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("sink: mark of consumer %s: %w", consumer, err)
}

// Mark records, durably, that consumer writes this tree.
func (d *Sink) Mark(ctx context.Context, consumer string) error {
	path := d.markPath(consumer)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sink: mark of consumer %s: %w", consumer, err)
	}
	data := fmt.Appendf(nil, "consumer %s has written this tree since %s\n", consumer, time.Now().UTC().Format(time.RFC3339))
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := createFile(tmp, data, true); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("sink: mark of consumer %s: %w", consumer, err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return syncDir(d.root)
}
