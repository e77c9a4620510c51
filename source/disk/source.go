// Package disk reads a SpecStar disk deployment (the tree sink/disk
// writes, or SpecStar's disk factory wrote) as a source, so that a disk
// mirror can be verified against, reconciled from, or exported back into
// an archive.
package disk

import (
	"context"
	"fmt"
	"io"
	"iter"

	disksink "github.com/specstar/replicator/sink/disk"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// Source reads a disk tree in archive order: per model (in byte order),
// each meta followed by its revisions, then the blobs the model's
// payloads reference that the tree holds (each once per model).
type Source struct {
	// URL is the tree: a path or disk:/path[?encoding=&meta=]; without
	// meta=, each model's meta store is detected.
	URL string
}

var _ base.Source = (*Source)(nil)

// Records yields the tree's records; the tree is open only while
// iterating.
func (s *Source) Records(ctx context.Context) iter.Seq2[base.Record, error] {
	return func(yield func(base.Record, error) bool) {
		spec, err := disksink.ParseSpec(s.URL)
		if err != nil {
			yield(base.Record{}, fmt.Errorf("source %s: %w", s.URL, err))
			return
		}
		d, err := spec.OpenReadOnly(ctx)
		if err != nil {
			yield(base.Record{}, fmt.Errorf("source %s: %w", s.URL, err))
			return
		}
		defer d.Close()
		models, err := d.Models(ctx)
		if err != nil {
			yield(base.Record{}, fmt.Errorf("source %s: %w", s.URL, err))
			return
		}
		for _, model := range models {
			if err := readModel(ctx, d, model, yield); err != nil {
				if err != errStop {
					yield(base.Record{}, fmt.Errorf("source %s: model %q: %w", s.URL, model, err))
				}
				return
			}
		}
	}
}

var errStop = fmt.Errorf("stop")

// readModel yields one model's metas, revisions and referenced blobs.
func readModel(ctx context.Context, d *disksink.Sink, model string, yield func(base.Record, error) bool) error {
	var refs []events.BinaryRef
	seen := map[string]bool{}
	for id, err := range d.ResourceIDs(ctx, model) {
		if err != nil {
			return err
		}
		meta, err := d.Meta(ctx, model, id)
		if err != nil {
			return err
		}
		raw, err := meta.Encode(events.Msgpack)
		if err != nil {
			return fmt.Errorf("meta %q: %w", id, err)
		}
		if !yield(base.Record{Model: model, Record: &events.MetaRecord{Data: raw}, Where: "disk meta " + id}, nil) {
			return errStop
		}
		keys, err := d.Revisions(ctx, model, id)
		if err != nil {
			return err
		}
		for _, k := range keys {
			info, data, err := d.Revision(ctx, model, id, k.RevisionID, k.SchemaVersion)
			if err != nil {
				return err
			}
			res := &events.RawResource{Info: *info, RawData: data}
			enc, err := res.Encode(events.Msgpack)
			if err != nil {
				return fmt.Errorf("revision %q: %w", k.RevisionID, err)
			}
			if !yield(base.Record{Model: model, Record: &events.RevisionRecord{Data: enc}, Where: "disk revision " + k.RevisionID}, nil) {
				return errStop
			}
			found, err := events.PayloadBinaryRefs(data)
			if err != nil {
				continue // not a payload we can read: its blobs are not found
			}
			for _, ref := range found {
				if !seen[ref.FileID] {
					seen[ref.FileID] = true
					refs = append(refs, ref)
				}
			}
		}
	}
	for _, ref := range refs {
		bin, r, err := d.OpenBlob(ctx, ref.FileID)
		if err != nil {
			// Not held: yield the reference, so a reader can tell.
			rec := &events.BlobRefRecord{FileID: ref.FileID, Size: ref.Size, ContentType: ref.ContentType}
			if !yield(base.Record{Model: model, Record: rec, Where: "disk blob (missing: " + err.Error() + ")"}, nil) {
				return errStop
			}
			continue
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return fmt.Errorf("blob %s: %w", ref.FileID, err)
		}
		rec := &events.BlobRecord{FileID: ref.FileID, BlobData: data, Size: int64(len(data)), ContentType: bin.ContentType.Value}
		if !yield(base.Record{Model: model, Record: rec, Where: "disk blob " + ref.FileID}, nil) {
			return errStop
		}
	}
	return nil
}
