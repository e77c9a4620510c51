// Package export writes what any source yields (an archive, a disk tree,
// a Postgres, Postgres+S3 or S3 deployment) as an .acbak archive, in
// SpecStar's layout, so that every deployment can be turned back into
// the archive SpecStar's own dump would write.
package export

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
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/internal/stores"
)

// ErrNoModels is the error of an export whose source yielded no model.
var ErrNoModels = errors.New("no models found")

// ErrExists is the error of an export to an existing file without Force.
var ErrExists = errors.New("already exists (--force overwrites it)")

// BlobOpener reads blobs a source only references (BlobRefRecords).
type BlobOpener = stores.BlobOpener

// Options tune Write.
type Options struct {
	// Blobs reads the blobs the source yields as references; nil: such
	// blobs are missing.
	Blobs BlobOpener
	// AllowMissingBlobs leaves out, with a warning, referenced blobs that
	// cannot be found; without it they are an error.
	AllowMissingBlobs bool
	// Force overwrites an existing file at the path.
	Force bool
	// Progress (may be nil) is called with the records and bytes written.
	Progress func(records, offset int64)
	// Log gets the warnings (nil: slog.Default()).
	Log *slog.Logger
}

// Stats count what Write wrote.
type Stats struct {
	Models    int   `json:"models"`
	Metas     int   `json:"metas"`
	Revisions int   `json:"revisions"`
	Blobs     int   `json:"blobs"`
	Missing   int   `json:"missing_blobs"` // referenced blobs left out (AllowMissingBlobs)
	Bytes     int64 `json:"bytes"`
}

// Write reads src once and writes it as an archive at path: per model,
// each meta followed by its revisions, then its blobs. The archive is
// written to a temporary file beside path, made 0644 and renamed, so a
// failed export leaves nothing under the name.
func Write(ctx context.Context, src source.Source, path string, o Options) (Stats, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if _, err := os.Lstat(path); err == nil && !o.Force {
		return Stats{}, fmt.Errorf("export to %s: %w", path, ErrExists)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".export-*.acbak")
	if err != nil {
		return Stats{}, fmt.Errorf("export to %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	e := &writer{w: acbak.NewWriter(bw), o: o, seen: map[string]bool{}}
	err = e.w.Write(&events.HeaderRecord{Version: events.FormatVersion})
	n := int64(0)
	for rec, rerr := range src.Records(ctx) {
		if err != nil {
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
		n++
		err = e.record(ctx, rec)
		if o.Progress != nil {
			o.Progress(n, e.w.Offset())
		}
	}
	if err == nil {
		err = e.endModel(ctx)
	}
	if err == nil && e.stats.Models == 0 {
		err = ErrNoModels
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
		err = tmp.Chmod(0o644)
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
	if err != nil && !errors.Is(err, ErrNoModels) {
		err = fmt.Errorf("export to %s: %w", path, err)
	}
	return e.stats, err
}

// writer writes one reading of a source as an archive.
type writer struct {
	w       *acbak.Writer
	o       Options
	model   string
	open    bool
	pending []*events.BlobRefRecord // blobs the open model references, in order
	seen    map[string]bool         // file ids written or pending in the open model
	stats   Stats
}

func (e *writer) record(ctx context.Context, rec source.Record) error {
	if !e.open || rec.Model != e.model {
		if err := e.endModel(ctx); err != nil {
			return err
		}
		if err := e.w.Write(&events.ModelStartRecord{ModelName: rec.Model}); err != nil {
			return err
		}
		e.model, e.open = rec.Model, true
		e.stats.Models++
	}
	switch r := rec.Record.(type) {
	case *events.MetaRecord:
		e.stats.Metas++
	case *events.RevisionRecord:
		e.stats.Revisions++
	case *events.BlobRecord:
		if e.seen[r.FileID] {
			return nil
		}
		e.seen[r.FileID] = true
		e.stats.Blobs++
	case *events.BlobRefRecord:
		if !e.seen[r.FileID] {
			e.seen[r.FileID] = true
			e.pending = append(e.pending, r)
		}
		return nil
	default:
		return nil
	}
	return e.w.Write(rec.Record)
}

// endModel writes the open model's referenced blobs and closes its
// section.
func (e *writer) endModel(ctx context.Context) error {
	if !e.open {
		return nil
	}
	for _, ref := range e.pending {
		if err := e.blob(ctx, ref); err != nil {
			return err
		}
	}
	e.pending, e.seen, e.open = nil, map[string]bool{}, false
	return e.w.Write(&events.ModelEndRecord{ModelName: e.model})
}

// blob writes one referenced blob, read from the blob store.
func (e *writer) blob(ctx context.Context, ref *events.BlobRefRecord) error {
	id := ref.FileID
	err := fmt.Errorf("model %q: blob %s: no blob store to read it from: %w", e.model, id, fs.ErrNotExist)
	var (
		bin *events.Binary
		r   io.ReadCloser
	)
	if e.o.Blobs != nil {
		bin, r, err = e.o.Blobs.OpenBlob(ctx, id)
		if err != nil {
			err = fmt.Errorf("model %q: blob %s: %w", e.model, id, err)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		if !e.o.AllowMissingBlobs {
			return fmt.Errorf("%w (a payload references it; --allow-missing-blobs leaves such blobs out)", err)
		}
		e.stats.Missing++
		e.o.Log.Warn("a payload references a blob the blob store does not hold; it is left out", "model", e.model, "file_id", id)
		return nil
	}
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return fmt.Errorf("model %q: blob %s: %w", e.model, id, err)
	}
	ct := ref.ContentType
	if bin != nil && bin.ContentType.IsSet() {
		ct = bin.ContentType.Value
	}
	if err := e.w.Write(&events.BlobRecord{FileID: id, BlobData: data, Size: int64(len(data)), ContentType: ct}); err != nil {
		return err
	}
	e.stats.Blobs++
	return nil
}

// OpenBlobs opens the blob store a source spec names, for the blobs its
// source only references: spec.Blobs (s3:// or a disk directory), else
// the blob bucket of an s3:// resource store, else (for a postgres://
// source) its URL's blobs= or resources= option. It returns nil when the
// source has no blob store; closeFn releases it.
func OpenBlobs(ctx context.Context, spec source.Spec) (b BlobOpener, closeFn func(), err error) {
	blobs, resources := spec.Blobs, spec.Resources
	if source.Scheme(spec.From) == "s3" && resources == "" {
		resources = spec.From
	}
	if blobs == "" && (source.Scheme(spec.From) == "postgres" || source.Scheme(spec.From) == "postgresql") {
		b, r := source.PostgresStores(spec.From)
		blobs = b
		if !stores.IsS3URL(resources) {
			resources = r
		}
	}
	switch {
	case blobs != "":
		s3b, disk, closeFn, err := stores.OpenBlobStore(ctx, trimDisk(blobs))
		if err != nil {
			return nil, nil, fmt.Errorf("blob store %s: %w", source.Redact(blobs), err)
		}
		if s3b != nil {
			return s3b, closeFn, nil
		}
		return disk, closeFn, nil
	case stores.IsS3URL(resources):
		st, err := stores.OpenResourceStore(ctx, resources)
		if err != nil {
			return nil, nil, fmt.Errorf("resource store %s: %w", source.Redact(resources), err)
		}
		return st, func() { st.Close() }, nil
	}
	return nil, func() {}, nil
}

// trimDisk turns disk:/path into the directory a blob store is opened at.
func trimDisk(s string) string {
	if len(s) > 5 && s[:5] == "disk:" {
		s = s[5:]
		if len(s) > 2 && s[:2] == "//" {
			s = s[2:]
		}
	}
	return s
}
