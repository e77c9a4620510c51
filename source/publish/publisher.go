// Package publish puts what a source reads onto the JetStream event
// stream: records with the blobs their payloads reference (inline, or
// streamed through the object store), a Postgres deployment's snapshot
// and live tail with their positions kept in the stream's positions
// bucket, and an S3 store's snapshot. It spans the backends, which only
// read; `writer snapshot` and `writer tail` are flags around it.
package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"

	"github.com/jackc/pglogrepl"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/stores"
	"github.com/specstar/replicator/stream"
)

// Hooks let the caller watch a publisher (progress meters, metrics);
// every field may be nil.
type Hooks struct {
	// Published is called after each event published.
	Published func()
	// Progress is called with the events and payload bytes published so
	// far.
	Progress func(events, bytes int64)
	// Streaming reports whether a tail is following its source.
	Streaming func(bool)
	// Restarted is called when a tail lost its source or stream and is
	// about to start again.
	Restarted func()
	// ConfirmedLSN reports the LSN a logical tail stored and confirmed to
	// Postgres.
	ConfirmedLSN func(pglogrepl.LSN)
	// Resnapshot is called when a logical tail found its slot past its
	// stored position (the bus lost acknowledged events) and publishes
	// the deployment again.
	Resnapshot func()
	// SlotLag reports the WAL the replication slot retains, in bytes.
	SlotLag func(bytes int64)
}

// BlobOpener reads a deployment's blob store blob by blob.
type BlobOpener = stores.BlobOpener

// maxSentBlobs bounds the memory of blob ids already published this run;
// forgetting them only costs re-reading a blob the stream de-duplicates.
const maxSentBlobs = 100_000

// Publisher publishes records onto the stream with the blobs their
// payloads reference, once per run; it exists so every source publishes
// blobs the same way.
type Publisher struct {
	bus    *stream.Bus
	pub    *stream.Publisher
	blobs  BlobOpener // nil: blobs are not published
	log    *slog.Logger
	hooks  Hooks
	sent   map[string]bool
	events int64
	bytes  int64
}

// NewPublisher returns a publisher onto bus with at most inflight events
// awaiting their acknowledgement; blobs (may be nil) is the blob store the
// blobs referenced by revisions are read from.
func NewPublisher(bus *stream.Bus, inflight int, blobs BlobOpener, log *slog.Logger, hooks Hooks) *Publisher {
	return &Publisher{bus: bus, pub: bus.NewPublisher(inflight), blobs: blobs, log: log, hooks: hooks, sent: map[string]bool{}}
}

// Events is how many events were published.
func (p *Publisher) Events() int64 { return p.events }

// Duplicates is how many published events the stream already held.
func (p *Publisher) Duplicates() int64 { return p.pub.Stats.Duplicates }

// BlobsSent is how many referenced blobs were published (and are still
// remembered) this run.
func (p *Publisher) BlobsSent() int { return len(p.sent) }

// Flush waits until every event published so far is acknowledged.
func (p *Publisher) Flush(ctx context.Context) error { return p.pub.Flush(ctx) }

// Publish publishes one record of model, then, for a revision, the blobs
// its payload references that were not published yet.
func (p *Publisher) Publish(ctx context.Context, model string, rec events.Record) error {
	return p.publish(ctx, model, rec, nil)
}

// publish is Publish with the record's exact bytes, where the caller has
// them (nil re-encodes).
func (p *Publisher) publish(ctx context.Context, model string, rec events.Record, payload []byte) error {
	env, err := events.EnvelopeFor(p.bus.Prefix(), model, rec, payload)
	if err != nil {
		return err
	}
	if err := p.pub.Publish(ctx, env); err != nil {
		return err
	}
	p.events++
	p.bytes += int64(len(env.Payload))
	if p.hooks.Published != nil {
		p.hooks.Published()
	}
	if rr, ok := rec.(*events.RevisionRecord); ok && p.blobs != nil {
		if err := p.publishBlobs(ctx, model, rr); err != nil {
			return err
		}
	}
	// After the blobs too, so the last report counts every event.
	if p.hooks.Progress != nil {
		p.hooks.Progress(p.events, p.bytes)
	}
	return nil
}

// publishBlobs publishes the blobs a revision's payload references, once
// per run: small ones inline as BlobRecords, large ones through the object
// store (streamed, never held whole) with a BlobRefRecord.
func (p *Publisher) publishBlobs(ctx context.Context, model string, rec *events.RevisionRecord) error {
	res, err := rec.Resource()
	if err != nil {
		return err
	}
	refs, err := events.PayloadBinaryRefs(res.RawData)
	if err != nil {
		p.log.Warn("payload does not decode; its blobs are not looked for", "revision_id", res.Info.RevisionID, "err", err)
		return nil
	}
	for _, ref := range refs {
		if p.sent[ref.FileID] {
			continue
		}
		if err := p.publishBlob(ctx, model, ref); err != nil {
			return fmt.Errorf("blob %s of %s: %w", ref.FileID, res.Info.RevisionID, err)
		}
		if len(p.sent) >= maxSentBlobs {
			clear(p.sent)
		}
		p.sent[ref.FileID] = true
	}
	return nil
}

func (p *Publisher) publishBlob(ctx context.Context, model string, ref events.BinaryRef) error {
	bin, r, err := p.blobs.OpenBlob(ctx, ref.FileID)
	if errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("a payload references a blob that the blob store does not hold", "file_id", ref.FileID)
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	// bin's content type is what SpecStar reads from the store: for S3, the
	// Content-Type S3 answers ("" only for our sink's marked objects).
	return p.PublishBlob(ctx, model, ref.FileID, bin, r)
}

// PublishBlob publishes one blob read from r: inline as a BlobRecord
// when it fits in a message, else streamed into the object store (never
// held whole) with a BlobRefRecord.
func (p *Publisher) PublishBlob(ctx context.Context, model, fileID string, bin *events.Binary, r io.Reader) error {
	if !bin.Size.IsSet() {
		return fmt.Errorf("the blob store does not say the size of blob %s", fileID)
	}
	size, ct := bin.Size.Value, bin.ContentType.Value
	pub := p.pub
	if pub.FitsInline(int(size) + 256) {
		data, err := io.ReadAll(io.LimitReader(r, size+1))
		if err != nil {
			return err
		}
		return p.Publish(ctx, model, &events.BlobRecord{FileID: fileID, BlobData: data, Size: int64(len(data)), ContentType: ct})
	}
	if err := pub.PutBlobStream(ctx, fileID, size, r); err != nil {
		return err
	}
	return p.Publish(ctx, model, &events.BlobRefRecord{FileID: fileID, Size: size, ContentType: ct, Bucket: p.bus.BlobBucket()})
}
