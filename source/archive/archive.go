// Package archive reads an .acbak archive as a source: it yields the
// archive's records for verify and reconcile (Source) and replays them
// onto the event stream with their exact frame bytes (Replay).
package archive

import (
	"context"
	"fmt"
	"io"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
)

// Publisher is where Replay sends events (stream.Publisher in
// production); declared here so the archive reader does not depend on the
// stream.
type Publisher interface {
	Publish(ctx context.Context, env *events.Envelope) error
	FitsInline(payloadLen int) bool
	PutBlob(ctx context.Context, fileID string, data []byte) error
}

// Stats counts what a replay sent.
type Stats struct {
	Frames     int             // frames read
	Bytes      int64           // bytes read
	Metas      int             // MetaRecords published
	Revisions  int             // RevisionRecords published
	Blobs      int             // BlobRecords read
	LargeBlobs int             // of those, sent through the object store
	Unknown    int             // records of unknown tags published unchanged
	Warnings   []acbak.Warning // what a lenient reader let pass
}

// Replay publishes every record of an archive's model sections, in
// order, as events whose payload is the record's exact frame bytes. Blobs
// too large for one message go to the object store first and travel as a
// BlobRefRecord. Header, ModelStart, ModelEnd and Eof frames carry no data
// and are not published; records with unknown tags are, unchanged.
func Replay(ctx context.Context, in io.Reader, opts acbak.Options, prefix, blobBucket string, pub Publisher, progress acbak.ProgressFunc) (*Stats, error) {
	opts.KeepUnknown = true
	r := acbak.NewReader(in, opts)
	st := &Stats{}
	model := ""
	for f, err := range r.All() {
		if err != nil {
			return st, err
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		rec, payload := f.Record, f.Payload
		switch rec := rec.(type) {
		case *events.HeaderRecord, *events.EofRecord:
			continue
		case *events.ModelStartRecord:
			model = rec.ModelName
			continue
		case *events.ModelEndRecord:
			model = ""
			continue
		case *events.MetaRecord:
			st.Metas++
		case *events.RevisionRecord:
			st.Revisions++
		case *events.BlobRecord:
			st.Blobs++
			if !pub.FitsInline(len(payload)) {
				if err := pub.PutBlob(ctx, rec.FileID, rec.BlobData); err != nil {
					return st, fmt.Errorf("frame %d at offset %d: %w", f.Index, f.Offset, err)
				}
				ref := &events.BlobRefRecord{FileID: rec.FileID, Size: rec.Size, ContentType: rec.ContentType, Bucket: blobBucket}
				st.LargeBlobs++
				rec, payload := events.Record(ref), []byte(nil)
				if err := publish(ctx, pub, prefix, model, rec, payload, f); err != nil {
					return st, err
				}
				st.Frames, st.Bytes = r.Frames(), r.Offset()
				continue
			}
		default:
			st.Unknown++
		}
		if err := publish(ctx, pub, prefix, model, rec, payload, f); err != nil {
			return st, err
		}
		st.Frames, st.Bytes = r.Frames(), r.Offset()
		if progress != nil && f.Index%256 == 0 {
			progress(r.Frames(), r.Offset())
		}
	}
	st.Frames, st.Bytes = r.Frames(), r.Offset()
	st.Warnings = r.Warnings()
	return st, nil
}

func publish(ctx context.Context, pub Publisher, prefix, model string, rec events.Record, payload []byte, f *acbak.Frame) error {
	env, err := events.EnvelopeFor(prefix, model, rec, payload)
	if err != nil {
		return fmt.Errorf("frame %d at offset %d: %w", f.Index, f.Offset, err)
	}
	if err := pub.Publish(ctx, env); err != nil {
		return fmt.Errorf("frame %d at offset %d: publish: %w", f.Index, f.Offset, err)
	}
	return nil
}
