package compare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source"
)

// VerifyOptions tune Verify.
type VerifyOptions struct {
	Scope
	Out io.Writer // each difference, one line each (nil: counted only)
}

// VerifyResult counts what Verify compared and found.
type VerifyResult struct {
	Metas, Revisions, Blobs int // source records compared
	Differences             int
}

// Equal reports whether the sink holds everything the source does.
func (r *VerifyResult) Equal() bool { return r.Differences == 0 }

// Verify checks that the sink holds every record of the source, with
// equal bytes: metas and revision infos compared in msgpack, payloads and
// blobs byte for byte. It reads the source once, as a stream, and looks
// each record up in the sink, so memory does not grow with either. The
// result counts what was compared even when reading the source fails.
func Verify(ctx context.Context, src source.Source, snk sink.Reader, opts VerifyOptions) (*VerifyResult, error) {
	c := &VerifyResult{}
	diff := func(where, format string, args ...any) {
		c.Differences++
		writeLine(opts.Out, "%s: %s", where, fmt.Sprintf(format, args...))
	}
	for sr, err := range src.Records(ctx) {
		if err != nil {
			return c, err
		}
		switch rec := sr.Record.(type) {
		case *events.MetaRecord:
			c.Metas++
			want, err := rec.Meta()
			if err != nil {
				diff(sr.Where, "source meta does not decode: %v", err)
				continue
			}
			got, err := snk.Meta(ctx, sr.Model, want.ResourceID)
			if err != nil {
				diff(sr.Where, "model %q meta %q: %v", sr.Model, want.ResourceID, missingOr(err))
				continue
			}
			if b, err := got.Encode(events.Msgpack); err != nil || !bytes.Equal(b, rec.Data) {
				diff(sr.Where, "model %q meta %q differs (sink: updated %s, %d revisions, current %s; source: updated %s, %d revisions, current %s)",
					sr.Model, want.ResourceID, got.UpdatedTime.Format(), got.TotalRevisionCount, got.CurrentRevisionID,
					want.UpdatedTime.Format(), want.TotalRevisionCount, want.CurrentRevisionID)
			}
		case *events.RevisionRecord:
			if opts.NoRevisions {
				continue
			}
			c.Revisions++
			want, err := rec.Resource()
			if err != nil {
				diff(sr.Where, "source revision does not decode: %v", err)
				continue
			}
			info, data, err := snk.Revision(ctx, sr.Model, want.Info.ResourceID, want.Info.RevisionID, want.Info.SchemaVersion)
			if err != nil {
				diff(sr.Where, "model %q revision %q: %v", sr.Model, want.Info.RevisionID, missingOr(err))
				continue
			}
			got := events.RawResource{Info: *info, RawData: data}
			if !bytes.Equal(data, want.RawData) {
				diff(sr.Where, "model %q revision %q: payload differs (%d bytes in sink, %d in source)", sr.Model, want.Info.RevisionID, len(data), len(want.RawData))
			} else if b, err := got.Encode(events.Msgpack); err != nil || !bytes.Equal(b, rec.Data) {
				diff(sr.Where, "model %q revision %q: info differs (sink uid %s, source uid %s)", sr.Model, want.Info.RevisionID, info.UID, want.Info.UID)
			}
		case *events.BlobRecord:
			if opts.NoBlobs {
				continue
			}
			c.Blobs++
			bin, n, sum, ok := readSinkBlob(ctx, snk, sr.Where, rec.FileID, diff)
			switch {
			case !ok:
			case n != int64(len(rec.BlobData)) || sum != dedup.FileID(rec.BlobData):
				diff(sr.Where, "blob %s: bytes differ (%d in sink, %d in source)", rec.FileID, n, len(rec.BlobData))
			case bin.ContentType.Value != rec.ContentType:
				diff(sr.Where, "blob %s: content type %q in sink, %q in source", rec.FileID, bin.ContentType.Value, rec.ContentType)
			}
		case *events.BlobRefRecord:
			// A live deployment's payload references a blob: the sink's
			// copy must hash to the file_id and have the size and type the
			// reference gives.
			if opts.NoBlobs {
				continue
			}
			c.Blobs++
			bin, n, sum, ok := readSinkBlob(ctx, snk, sr.Where, rec.FileID, diff)
			switch {
			case !ok:
			case sum != rec.FileID:
				diff(sr.Where, "blob %s: the sink's %d bytes do not hash to its file_id", rec.FileID, n)
			case rec.Size >= 0 && n != rec.Size:
				diff(sr.Where, "blob %s: %d bytes in sink, the reference says %d", rec.FileID, n, rec.Size)
			case rec.ContentType != "" && bin.ContentType.Value != rec.ContentType:
				// A reference without a type says nothing to compare: such a
				// blob reads back with the type its store answers (S3's
				// default), which is what SpecStar reports too.
				diff(sr.Where, "blob %s: content type %q in sink, %q in the reference", rec.FileID, bin.ContentType.Value, rec.ContentType)
			}
		}
	}
	return c, nil
}

// readSinkBlob reads a sink's blob through the file_id hasher, for
// Verify: its Binary, its length and its hash. A blob that cannot be
// opened or read is reported through diff, and ok is false.
func readSinkBlob(ctx context.Context, snk sink.Reader, where, fileID string, diff func(where, format string, args ...any)) (bin *events.Binary, n int64, sum string, ok bool) {
	bin, r, err := snk.OpenBlob(ctx, fileID)
	if err != nil {
		diff(where, "blob %s: %v", fileID, missingOr(err))
		return nil, 0, "", false
	}
	defer r.Close()
	h := dedup.NewFileIDHasher()
	if n, err = io.Copy(h, r); err != nil {
		diff(where, "blob %s: reading it: %v", fileID, err)
		return nil, 0, "", false
	}
	return bin, n, dedup.HexSum(h), true
}

func missingOr(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "missing from the sink"
	}
	return err.Error()
}
