package publish

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source"
)

// RecordStats counts what Records published.
type RecordStats struct {
	Metas, Revisions, Blobs, Missing, Purges int
}

// Records publishes every record src yields, in its order, with exact
// bytes where the source has them, and its blobs inline or through the
// object store by size: a snapshot of a source that has no live tail of
// its own (an archive, a disk deployment). A blob the source references
// but does not hold is counted as missing and not published, unless the
// publisher reads a blob store (then the revision referencing it
// published it).
func (p *Publisher) Records(ctx context.Context, src source.Source) (RecordStats, error) {
	var st RecordStats
	for r, err := range src.Records(ctx) {
		if err != nil {
			return st, err
		}
		if err := p.record(ctx, r, &st); err != nil {
			return st, err
		}
	}
	return st, p.Flush(ctx)
}

// record publishes one record a source yielded: blobs the source holds
// as BlobRecords (inline or through the object store), references as
// missing unless the publisher reads blobs itself (then the revision that
// references a blob published it), anything else with its exact bytes.
func (p *Publisher) record(ctx context.Context, r source.Record, st *RecordStats) error {
	switch rec := r.Record.(type) {
	case *events.BlobRecord:
		bin := &events.Binary{FileID: events.Some(rec.FileID), Size: events.Some(int64(len(rec.BlobData))), ContentType: events.Some(rec.ContentType)}
		if err := p.PublishBlob(ctx, r.Model, rec.FileID, bin, bytes.NewReader(rec.BlobData)); err != nil {
			return fmt.Errorf("%s: blob %s: %w", r.Where, rec.FileID, err)
		}
		st.Blobs++
	case *events.BlobRefRecord:
		if p.blobs != nil {
			return nil // published with the revision referencing it
		}
		st.Missing++
		p.log.Warn("a referenced blob the source does not hold is not published", "model", r.Model, "file_id", rec.FileID, "where", r.Where)
	default:
		if err := p.publish(ctx, r.Model, rec, r.Payload); err != nil {
			return fmt.Errorf("%s: %w", r.Where, err)
		}
		switch rec.(type) {
		case *events.MetaRecord:
			st.Metas++
		case *events.RevisionRecord:
			st.Revisions++
		case *events.PurgeRecord:
			st.Purges++
		}
	}
	return nil
}

// Follower is a source that can be followed by polling (the all-S3
// factory): every record once, then what changes, pass after pass.
type Follower interface {
	Follow(ctx context.Context, interval time.Duration, yield func(source.Record) error, passDone func() error) error
}

// Follow publishes what src yields as it follows its source, waiting
// after each pass until the stream acknowledged it, until ctx ends; it
// returns what it published and ctx's error (or the first other one). It
// keeps no position: a restart publishes the whole source again, which
// the stream's de-duplication and the sinks absorb.
func (p *Publisher) Follow(ctx context.Context, src Follower, interval time.Duration) (RecordStats, error) {
	var st RecordStats
	err := src.Follow(ctx, interval,
		func(r source.Record) error { return p.record(ctx, r, &st) },
		func() error { return p.Flush(ctx) })
	return st, err
}
