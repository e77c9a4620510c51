package postgres

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
)

// ExportStats count what Export wrote.
type ExportStats struct {
	Models    int // model sections written
	Metas     int // MetaRecords written
	Revisions int // RevisionRecords written
	Blobs     int // BlobRecords written
	// Missing counts blobs a payload references that the blob store does
	// not hold; they are left out (and logged).
	Missing int
	// Bytes is the archive's size.
	Bytes int64
}

// Export writes one consistent snapshot of the deployment as an .acbak
// archive at path, in SpecStar's layout: per model, each meta followed by
// its revisions, then the blobs that model's payloads reference (none when
// the deployment has no blob store). It exists so that a live deployment
// can be backed up, or moved, as an archive. The archive is written to a
// temporary file beside path and renamed, so a failed export leaves no
// half archive under the name. progress (may be nil) is called with the
// records and bytes written so far.
func Export(ctx context.Context, d *Deployment, path string, log *slog.Logger, progress func(records, offset int64)) (ExportStats, error) {
	e := &exporter{seen: map[string]bool{}, log: log, blobs: d.Blobs}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".export-*.acbak")
	if err != nil {
		return e.stats, fmt.Errorf("export to %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	e.w = acbak.NewWriter(bw)
	n := int64(0)
	err = e.w.Write(&events.HeaderRecord{Version: events.FormatVersion})
	if err == nil {
		_, err = d.Source.Snapshot(ctx, Position{}, func(model string, rec events.Record, _ Position) error {
			n++
			if progress != nil {
				progress(n, e.w.Offset())
			}
			return e.record(ctx, model, rec)
		})
	}
	if err == nil {
		err = e.endModel(ctx)
	}
	if err == nil {
		err = e.w.Write(&events.EofRecord{})
	}
	if err == nil {
		err = e.w.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	e.stats.Bytes = e.w.Offset()
	return e.stats, err
}

// exporter writes one snapshot of a deployment as an archive.
type exporter struct {
	w       *acbak.Writer
	blobs   BlobOpener // nil: no blob store configured, blobs are left out
	model   string
	open    bool
	pending []events.BinaryRef // blobs the open model references, in order
	seen    map[string]bool
	stats   ExportStats
	log     *slog.Logger
}

func (e *exporter) record(ctx context.Context, model string, rec events.Record) error {
	if !e.open || model != e.model {
		if err := e.endModel(ctx); err != nil {
			return err
		}
		if err := e.w.Write(&events.ModelStartRecord{ModelName: model}); err != nil {
			return err
		}
		e.model, e.open = model, true
		e.stats.Models++
	}
	switch r := rec.(type) {
	case *events.MetaRecord:
		e.stats.Metas++
	case *events.RevisionRecord:
		e.stats.Revisions++
		if e.blobs != nil {
			res, err := r.Resource()
			if err != nil {
				return err
			}
			if refs, err := events.PayloadBinaryRefs(res.RawData); err == nil {
				for _, ref := range refs {
					if !e.seen[ref.FileID] {
						e.seen[ref.FileID] = true
						e.pending = append(e.pending, ref)
					}
				}
			}
		}
	}
	return e.w.Write(rec)
}

// endModel writes the open model's blobs and closes its section.
func (e *exporter) endModel(ctx context.Context) error {
	if !e.open {
		return nil
	}
	for _, ref := range e.pending {
		id := ref.FileID
		bin, r, err := e.blobs.OpenBlob(ctx, id)
		if errors.Is(err, fs.ErrNotExist) {
			e.stats.Missing++
			e.log.Warn("a payload references a blob the blob store does not hold; it is left out", "model", e.model, "file_id", id)
			continue
		}
		if err != nil {
			return fmt.Errorf("blob %s: %w", id, err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return fmt.Errorf("blob %s: %w", id, err)
		}
		if err := e.w.Write(&events.BlobRecord{FileID: id, BlobData: data, Size: int64(len(data)), ContentType: bin.ContentType.Value}); err != nil {
			return err
		}
		e.stats.Blobs++
	}
	e.pending, e.seen = nil, map[string]bool{}
	e.open = false
	return e.w.Write(&events.ModelEndRecord{ModelName: e.model})
}
