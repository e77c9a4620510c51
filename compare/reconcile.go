package compare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source"
)

// Reconcile compares a sink with its source of truth and repairs the sink
// by publishing the source's version of every record the sink lacks or
// holds an older version of; the replicator then applies them. It never
// deletes anything (that is Prune's, after it).
//
// Memory does not depend on the size of either store: the source is read
// as a stream (an archive in file order, which is not sorted; a Postgres
// snapshot in (model, resource_id) order) and every source record is
// looked up in the sink point-wise, as Verify does.

// Publisher sends the records Reconcile and Prune decide to publish; a
// BusPublisher puts them on the event stream.
type Publisher interface {
	Publish(ctx context.Context, rec source.Record) error
}

// ReconcileOptions tune Reconcile.
type ReconcileOptions struct {
	Scope
	Fix   Publisher    // where repairs go; nil is a dry run that only reports them
	Out   io.Writer    // each difference and what is done about it, one line each (nil: counted only)
	Index *SourceIndex // if set, records every resource the source holds, for Prune
}

// ReconcileResult counts what Reconcile found and did.
type ReconcileResult struct {
	Metas, Revisions, Blobs int // source records compared
	Differences             int // every difference reported
	Repairs                 int // differences a published record repairs (or would, in a dry run)
	Published               struct{ Metas, Revisions, Blobs int }
}

// Reconcile compares every source record with the sink and publishes
// each missing or older one through opts.Fix. The result counts what was
// done even when it fails.
func Reconcile(ctx context.Context, src source.Source, snk sink.Reader, opts ReconcileOptions) (*ReconcileResult, error) {
	st := &ReconcileResult{}
	fix := opts.Fix
	diff := func(rr source.Record, repair bool, format string, args ...any) error {
		st.Differences++
		action := "left alone"
		if repair {
			st.Repairs++
			action = "to publish"
			if fix != nil {
				action = "published"
			}
		}
		writeLine(opts.Out, "%s: %s: %s", rr.Where, fmt.Sprintf(format, args...), action)
		if !repair || fix == nil {
			return nil
		}
		if err := fix.Publish(ctx, rr); err != nil {
			return fmt.Errorf("%s: %w", rr.Where, err)
		}
		switch rr.Record.(type) {
		case *events.MetaRecord:
			st.Published.Metas++
		case *events.RevisionRecord:
			st.Published.Revisions++
		case *events.BlobRecord:
			st.Published.Blobs++
		}
		return nil
	}
	for rr, err := range src.Records(ctx) {
		if err != nil {
			return st, err
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if opts.Index != nil {
			if err := opts.Index.record(ctx, rr); err != nil {
				return st, err
			}
		}
		var derr error
		switch rec := rr.Record.(type) {
		case *events.MetaRecord:
			st.Metas++
			derr = reconcileMeta(ctx, rr, rec, snk, diff)
		case *events.RevisionRecord:
			if opts.NoRevisions {
				continue
			}
			st.Revisions++
			derr = reconcileRevision(ctx, rr, rec, snk, diff)
		case *events.BlobRecord:
			if opts.NoBlobs {
				continue
			}
			st.Blobs++
			derr = reconcileBlob(ctx, rr, rec, snk, diff)
		}
		if derr != nil {
			return st, derr
		}
	}
	return st, nil
}

type diffFunc func(rr source.Record, repair bool, format string, args ...any) error

// reconcileMeta: a missing meta, or one older than the source's (earlier
// updated_time, or fewer revisions at the same time), is published; a
// newer one, or one that differs at equal time and count, is reported and
// left alone (the sink keeps the newer meta anyway).
func reconcileMeta(ctx context.Context, rr source.Record, rec *events.MetaRecord, snk sink.Reader, diff diffFunc) error {
	want, err := rec.Meta()
	if err != nil {
		return diff(rr, false, "source meta does not decode: %v", err)
	}
	got, err := snk.Meta(ctx, rr.Model, want.ResourceID)
	if errors.Is(err, fs.ErrNotExist) {
		return diff(rr, true, "model %q meta %q missing from the sink", rr.Model, want.ResourceID)
	}
	if err != nil {
		return fmt.Errorf("%s: model %q meta %q: %w", rr.Where, rr.Model, want.ResourceID, err)
	}
	if b, err := got.Encode(events.Msgpack); err == nil && bytes.Equal(b, rec.Data) {
		return nil
	}
	c := got.UpdatedTime.Instant().Compare(want.UpdatedTime.Instant())
	if c == 0 {
		c = cmpInt(got.TotalRevisionCount, want.TotalRevisionCount)
	}
	desc := fmt.Sprintf("sink: updated %s, %d revisions, current %s; source: updated %s, %d revisions, current %s",
		got.UpdatedTime.Format(), got.TotalRevisionCount, got.CurrentRevisionID,
		want.UpdatedTime.Format(), want.TotalRevisionCount, want.CurrentRevisionID)
	switch {
	case c < 0:
		return diff(rr, true, "model %q meta %q older in the sink (%s)", rr.Model, want.ResourceID, desc)
	case c > 0:
		return diff(rr, false, "model %q meta %q newer in the sink (%s)", rr.Model, want.ResourceID, desc)
	default:
		return diff(rr, false, "model %q meta %q differs at equal updated_time and revision count (%s)", rr.Model, want.ResourceID, desc)
	}
}

func schemaVersion(v events.Opt[string]) string {
	if !v.IsSet() {
		return "none"
	}
	return strconv.Quote(v.Value)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// reconcileRevision: a revision missing at (resource_id, revision_id,
// schema_version), or whose data_hash, payload or info bytes differ, is
// published (the sink's own rule decides which version stays).
func reconcileRevision(ctx context.Context, rr source.Record, rec *events.RevisionRecord, snk sink.Reader, diff diffFunc) error {
	want, err := rec.Resource()
	if err != nil {
		return diff(rr, false, "source revision does not decode: %v", err)
	}
	wi := want.Info
	info, data, err := snk.Revision(ctx, rr.Model, wi.ResourceID, wi.RevisionID, wi.SchemaVersion)
	if errors.Is(err, fs.ErrNotExist) {
		return diff(rr, true, "model %q resource %q revision %q (schema version %s) missing from the sink", rr.Model, wi.ResourceID, wi.RevisionID, schemaVersion(wi.SchemaVersion))
	}
	if err != nil {
		return fmt.Errorf("%s: model %q revision %q: %w", rr.Where, rr.Model, wi.RevisionID, err)
	}
	switch {
	case info.DataHash != wi.DataHash:
		return diff(rr, true, "model %q resource %q revision %q: data_hash %s in the sink, %s in the source",
			rr.Model, wi.ResourceID, wi.RevisionID, info.DataHash.Value, wi.DataHash.Value)
	case !bytes.Equal(data, want.RawData):
		return diff(rr, true, "model %q resource %q revision %q: payload differs (%d bytes in the sink, %d in the source)",
			rr.Model, wi.ResourceID, wi.RevisionID, len(data), len(want.RawData))
	}
	got := events.RawResource{Info: *info, RawData: data}
	if b, err := got.Encode(events.Msgpack); err != nil || !bytes.Equal(b, rec.Data) {
		return diff(rr, true, "model %q resource %q revision %q: info differs (sink uid %s, source uid %s)",
			rr.Model, wi.ResourceID, wi.RevisionID, info.UID, wi.UID)
	}
	return nil
}

// reconcileBlob: a missing blob is published; a blob file whose bytes do
// not hash to its file_id is reported and left alone (content-addressed
// sinks keep the file they have: remove it, then reconcile again).
func reconcileBlob(ctx context.Context, rr source.Record, rec *events.BlobRecord, snk sink.Reader, diff diffFunc) error {
	bin, r, err := snk.OpenBlob(ctx, rec.FileID)
	if errors.Is(err, fs.ErrNotExist) {
		return diff(rr, true, "blob %s missing from the sink", rec.FileID)
	}
	if err != nil {
		return fmt.Errorf("%s: blob %s: %w", rr.Where, rec.FileID, err)
	}
	hs := dedup.NewFileIDHasher()
	n, err := io.Copy(hs, r)
	r.Close()
	switch {
	case err != nil:
		return fmt.Errorf("%s: blob %s: reading it: %w", rr.Where, rec.FileID, err)
	case n != int64(len(rec.BlobData)) || dedup.HexSum(hs) != dedup.FileID(rec.BlobData):
		return diff(rr, false, "blob %s: bytes differ (%d in the sink, %d in the source)", rec.FileID, n, len(rec.BlobData))
	case bin.ContentType.Value != rec.ContentType:
		return diff(rr, false, "blob %s: content type %q in the sink, %q in the source", rec.FileID, bin.ContentType.Value, rec.ContentType)
	}
	return nil
}
