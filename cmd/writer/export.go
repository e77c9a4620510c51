package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/postgres"
)

// archiveExporter writes one snapshot of a deployment as an archive in
// SpecStar's layout: per model, each meta followed by its revisions, then
// the blobs that model's payloads reference.
type archiveExporter struct {
	w       *acbak.Writer
	blobs   blobOpener // nil: no blob store configured, blobs are left out
	model   string
	open    bool
	pending []events.BinaryRef // blobs the open model references, in order
	seen    map[string]bool
	stats   struct{ models, metas, revisions, blobs, missing int }
	log     *slog.Logger
}

func (e *archiveExporter) record(ctx context.Context, model string, rec events.Record) error {
	if !e.open || model != e.model {
		if err := e.endModel(ctx); err != nil {
			return err
		}
		if err := e.w.Write(&events.ModelStartRecord{ModelName: model}); err != nil {
			return err
		}
		e.model, e.open = model, true
		e.stats.models++
	}
	switch r := rec.(type) {
	case *events.MetaRecord:
		e.stats.metas++
	case *events.RevisionRecord:
		e.stats.revisions++
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
func (e *archiveExporter) endModel(ctx context.Context) error {
	if !e.open {
		return nil
	}
	for _, ref := range e.pending {
		id := ref.FileID
		bin, r, err := e.blobs.OpenBlob(ctx, id)
		if errors.Is(err, fs.ErrNotExist) {
			e.stats.missing++
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
		if err := e.w.Write(&events.BlobRecord{FileID: id, BlobData: data, Size: int64(len(data)), ContentType: contentType(e.blobs, bin, ref)}); err != nil {
			return err
		}
		e.stats.blobs++
	}
	e.pending, e.seen = nil, map[string]bool{}
	e.open = false
	return e.w.Write(&events.ModelEndRecord{ModelName: e.model})
}

func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	from := fs.String("from", "", "the deployment's Postgres: postgres://...?table_prefix=&revisions=true&blobs=DIR (as for writer snapshot)")
	var stores storeFlags
	stores.register(fs)
	var config configFlag
	config.register(fs)
	path, ok := parseArgs(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if err := config.resolve(fs, from, &stores); err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitUsage
	}
	if *from == "" {
		fmt.Fprintln(stderr, "writer export: --from postgres://... is required")
		return exitUsage
	}
	if _, _, err := postgres.ParseURL(*from); err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitUsage
	}
	d, err := openDeployment(ctx, *from, stores)
	if err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitInvalid
	}
	defer d.close()
	src := d.src
	e := &archiveExporter{seen: map[string]bool{}, log: log, blobs: d.blobs}
	// Written to a temporary file and renamed, so a failed export leaves
	// no half archive under the name.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".export-*.acbak")
	if err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitInvalid
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriterSize(tmp, 1<<20)
	e.w = acbak.NewWriter(bw)
	start := time.Now()
	meter := progress.New("export "+source.Redact(*from), 0, log)
	n := int64(0)
	err = e.w.Write(&events.HeaderRecord{Version: events.FormatVersion})
	if err == nil {
		_, err = src.Snapshot(ctx, postgres.Position{}, func(model string, rec events.Record, _ postgres.Position) error {
			n++
			meter.Update(n, e.w.Offset())
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
	meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "writer export: %v\n", err)
		return exitInvalid
	}
	fmt.Fprintf(stdout, "exported %s to %s in %s: %d models, %d metas, %d revisions, %d blobs (%d referenced but missing), %d bytes\n",
		source.Redact(*from), path, time.Since(start).Round(time.Millisecond), e.stats.models, e.stats.metas, e.stats.revisions, e.stats.blobs, e.stats.missing, e.w.Offset())
	return exitOK
}
