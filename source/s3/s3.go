// Package s3 reads a whole SpecStar S3 store (the resource stores of the
// Postgres+S3 factory, {model}/data/resources/..., and its blob store)
// without the metas: every revision of every model, then every blob. It
// exists to publish or back up such a store when its metas are not read.
package s3

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"slices"

	"github.com/specstar/replicator/events"
)

// Revisions is the resource-store side Snapshot reads (s3sink.Sink is
// one); declared here so the source does not depend on the S3 code.
type Revisions interface {
	// Models lists the models that have a resource store.
	Models(ctx context.Context) ([]string, error)
	// WalkRevisions calls fn with every revision of a model.
	WalkRevisions(ctx context.Context, model string, fn func(*events.RawResource) error) error
}

// Blobs is the blob-store side Snapshot reads (s3sink.Sink is one).
type Blobs interface {
	// WalkBlobs calls fn with every blob's Binary (no data) and a way to
	// stream its bytes.
	WalkBlobs(ctx context.Context, fn func(b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error) error
}

// Handler receives what Snapshot reads; it exists so the caller (the
// publisher) decides how a blob travels (inline or streamed).
type Handler struct {
	// Record receives each RevisionRecord (RawResource, msgpack).
	Record func(model string, rec events.Record) error
	// Blob receives each blob with the model whose payloads reference it
	// first (the first model, for a blob no payload references); open
	// streams its bytes. Nil: blobs are not read.
	Blob func(ctx context.Context, model string, b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error
	// Progress (may be nil) is called after each record and blob.
	Progress func(Stats)
}

// Stats report what Snapshot read.
type Stats struct {
	Models            []string // the models read, in order
	Revisions         int      // RevisionRecords emitted
	Blobs             int      // blobs handed to Blob
	BlobBytes         int64    // their declared sizes
	UnreferencedBlobs int      // blobs no revision read references
}

// Snapshot emits every revision of the given models (all models of the
// store when none are given), model by model in name order, then every
// blob of blobs (nil: none). It exists to publish a Postgres+S3
// deployment's resource and blob stores when its metas are not read, or
// to back them up whole. There are no metas in S3, so no MetaRecords. A
// blob is attributed to the first model whose payload references it
// (subjects and archives are per model); remembering that costs about 40
// bytes per referenced blob, never the blob. Blob bytes are never read
// here: Blob streams them as it sees fit.
func Snapshot(ctx context.Context, revs Revisions, blobs Blobs, models []string, h Handler) (Stats, error) {
	var st Stats
	if h.Record == nil {
		return st, fmt.Errorf("source: s3 snapshot: a Record handler is required")
	}
	if len(models) == 0 {
		m, err := revs.Models(ctx)
		if err != nil {
			return st, fmt.Errorf("source: s3 snapshot: list models: %w", err)
		}
		models = m
	}
	models = slices.Compact(slices.Sorted(slices.Values(models)))
	st.Models = models
	progress := func() {
		if h.Progress != nil {
			h.Progress(st)
		}
	}
	// file_id -> index of the first model referencing it. A blob's content
	// type is what S3 answers, as SpecStar reads it (S3's default for a
	// blob SpecStar stored without one), not the payload reference's.
	owner := map[[16]byte]int32{}
	for mi, model := range models {
		err := revs.WalkRevisions(ctx, model, func(raw *events.RawResource) error {
			b, err := raw.Encode(events.Msgpack)
			if err != nil {
				return fmt.Errorf("source: s3 snapshot: model %q revision %q (uid %s): encode: %w", model, raw.Info.RevisionID, raw.Info.UID, err)
			}
			if blobs != nil && h.Blob != nil {
				// A payload that does not decode references nothing we can find.
				refs, _ := events.PayloadBinaryRefs(raw.RawData)
				for _, ref := range refs {
					if k, ok := fileKey(ref.FileID); ok {
						if _, seen := owner[k]; !seen {
							owner[k] = int32(mi)
						}
					}
				}
			}
			if err := h.Record(model, &events.RevisionRecord{Data: b}); err != nil {
				return err
			}
			st.Revisions++
			progress()
			return nil
		})
		if err != nil {
			return st, err
		}
	}
	if blobs == nil || h.Blob == nil {
		return st, nil
	}
	err := blobs.WalkBlobs(ctx, func(b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error {
		k, ok := fileKey(b.FileID.Value)
		mi, referenced := owner[k]
		if !ok || !referenced {
			st.UnreferencedBlobs++
			if len(models) == 0 {
				return nil // no model to carry it
			}
			mi = 0
		}
		if err := h.Blob(ctx, models[mi], b, open); err != nil {
			return err
		}
		st.Blobs++
		st.BlobBytes += b.Size.Value
		progress()
		return nil
	})
	return st, err
}

// fileKey is a file_id (32 lower-case hex digits) as 16 bytes.
func fileKey(id string) ([16]byte, bool) {
	var k [16]byte
	if len(id) != 32 {
		return k, false
	}
	_, err := hex.Decode(k[:], []byte(id))
	return k, err == nil
}
