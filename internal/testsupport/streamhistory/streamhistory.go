// Package streamhistory publishes a small SpecStar history onto a stream
// in phases (creates with blobs, updates, soft deletes, purges), records
// where each phase ends on the stream (its last sequence and the time the
// stream stored it), and builds the reference sink as of any phase by
// applying the same records straight to a fresh disk sink. It exists for
// the tests of point-in-time restore and export, which compare a restore
// as of a phase's end with that reference.
package streamhistory

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// Item is one record published, with its model and, for a blob, its
// bytes (the record on the stream may be a reference to the object store).
type Item struct {
	Model string
	Rec   events.Record
	Blob  []byte // a blob's bytes; nil for other records
}

// Phase is what was published between two EndPhase calls, and where it
// ends on the stream.
type Phase struct {
	Items    []Item
	LastSeq  uint64    // the stream sequence of the phase's last event
	LastTime time.Time // when the stream stored it
}

// History publishes records and remembers them by phase.
type History struct {
	t      testing.TB
	bus    *stream.Bus
	pub    *stream.Publisher
	cur    []Item
	Phases []Phase // the phases ended so far
	metas  map[string]*events.ResourceMeta
	clock  time.Time // SpecStar's write times: one second apart, always newer
}

// New is an empty history publishing onto bus.
func New(t testing.TB, bus *stream.Bus) *History {
	return &History{t: t, bus: bus, pub: bus.NewPublisher(64), metas: map[string]*events.ResourceMeta{},
		clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (h *History) now() events.Time {
	h.clock = h.clock.Add(time.Second)
	return events.Time{Time: h.clock}
}

func (h *History) publish(model string, rec events.Record, blob []byte) {
	h.t.Helper()
	env, err := events.EnvelopeFor(h.bus.Prefix(), model, rec, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.pub.Publish(h.t.Context(), env); err != nil {
		h.t.Fatal(err)
	}
	h.cur = append(h.cur, Item{Model: model, Rec: rec, Blob: blob})
}

// Blob publishes a blob, inline when it fits in one message, else through
// the object store (a BlobRefRecord on the stream), and returns the
// reference a payload holds to it.
func (h *History) Blob(model string, data []byte) events.Value {
	h.t.Helper()
	id := dedup.FileID(data)
	rec := events.Record(&events.BlobRecord{FileID: id, BlobData: data, Size: int64(len(data)), ContentType: "application/octet-stream"})
	payload, err := rec.Encode(events.Msgpack)
	if err != nil {
		h.t.Fatal(err)
	}
	if !h.pub.FitsInline(len(payload)) {
		if err := h.pub.PutBlob(h.t.Context(), id, data); err != nil {
			h.t.Fatal(err)
		}
		rec = &events.BlobRefRecord{FileID: id, Size: int64(len(data)), ContentType: "application/octet-stream", Bucket: h.bus.BlobBucket()}
	}
	h.publish(model, rec, data)
	return events.Struct{Declared: 4, Fields: []events.StructField{
		{Name: "file_id", Value: id}, {Name: "size", Value: int64(len(data))}, {Name: "content_type", Value: "application/octet-stream"}}}
}

// Write publishes a new revision of rid (its first when rid is new) with
// a payload naming its number and holding file, when not nil; then its
// meta, as SpecStar writes the resource store before the meta.
func (h *History) Write(model, rid string, file events.Value) {
	h.t.Helper()
	key := model + "/" + rid
	prev := h.metas[key]
	n := int64(1)
	if prev != nil {
		n = prev.TotalRevisionCount + 1
	}
	fields := []events.StructField{{Name: "title", Value: rid}, {Name: "n", Value: n}}
	if file != nil {
		fields = append(fields, events.StructField{Name: "file", Value: file})
	}
	data, err := events.EncodeValue(events.Msgpack, events.Struct{Declared: 3, Fields: fields})
	if err != nil {
		h.t.Fatal(err)
	}
	at := h.now()
	info := events.RevisionInfo{
		UID: fmt.Sprintf("%08x-0000-4000-8000-%012x", len(h.metas), h.clock.Unix()), ResourceID: rid,
		RevisionID: fmt.Sprintf("%s:%d", rid, n), ParentRevisionID: events.Null[string](), SchemaVersion: events.Null[string](),
		DataHash: events.Some(dedup.DataHash(data)), Status: "stable",
		CreatedTime: at, UpdatedTime: at, CreatedBy: "tester", UpdatedBy: "tester",
	}
	meta := &events.ResourceMeta{
		CurrentRevisionID: info.RevisionID, ResourceID: rid, SchemaVersion: events.Null[string](), TotalRevisionCount: n,
		CreatedTime: at, UpdatedTime: at, CreatedBy: "tester", UpdatedBy: "tester",
	}
	if prev != nil {
		info.ParentRevisionID = events.Some(prev.CurrentRevisionID)
		meta.CreatedTime = prev.CreatedTime
	}
	raw, err := (&events.RawResource{Info: info, RawData: data}).Encode(events.Msgpack)
	if err != nil {
		h.t.Fatal(err)
	}
	h.publish(model, &events.RevisionRecord{Data: raw}, nil)
	h.putMeta(model, meta)
}

// SoftDelete publishes rid's meta marked deleted, as SpecStar's delete
// writes it: the revisions stay.
func (h *History) SoftDelete(model, rid string) {
	h.t.Helper()
	prev := h.metas[model+"/"+rid]
	if prev == nil {
		h.t.Fatalf("streamhistory: soft delete of %s/%s, which was never written", model, rid)
	}
	meta := *prev
	meta.IsDeleted, meta.UpdatedTime = true, h.now()
	h.putMeta(model, &meta)
}

// Purge publishes rid's permanent deletion.
func (h *History) Purge(model, rid string) {
	h.t.Helper()
	delete(h.metas, model+"/"+rid)
	h.publish(model, &events.PurgeRecord{ResourceID: rid, PurgedTime: h.now()}, nil)
}

func (h *History) putMeta(model string, meta *events.ResourceMeta) {
	h.t.Helper()
	data, err := meta.Encode(events.Msgpack)
	if err != nil {
		h.t.Fatal(err)
	}
	h.metas[model+"/"+meta.ResourceID] = meta
	h.publish(model, &events.MetaRecord{Data: data}, nil)
}

// EndPhase waits until the stream holds everything published, records
// the phase with its last sequence and time, and waits until the clock
// has passed that time, so that every later event is stored after it.
func (h *History) EndPhase() Phase {
	h.t.Helper()
	ctx := h.t.Context()
	if err := h.pub.Flush(ctx); err != nil {
		h.t.Fatal(err)
	}
	info, err := h.bus.Stream.Info(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	p := Phase{Items: h.cur, LastSeq: info.State.LastSeq, LastTime: info.State.LastTime}
	h.cur = nil
	h.Phases = append(h.Phases, p)
	waitfor.For(h.t, "the clock to pass the phase's last event", func() bool { return time.Now().After(p.LastTime) })
	return p
}

// Reference applies the records of the first n phases, in order, to a
// fresh disk sink at dir, one at a time (each made durable before the
// next): the state as of the end of phase n, built without the stream.
func (h *History) Reference(dir string, n int) {
	h.t.Helper()
	ctx := context.Background()
	snk, err := sink.Open(ctx, "disk:"+dir)
	if err != nil {
		h.t.Fatal(err)
	}
	defer snk.Close()
	for _, p := range h.Phases[:n] {
		for _, it := range p.Items {
			if err := apply(ctx, snk, it); err != nil {
				h.t.Fatalf("reference sink: %v", err)
			}
			if err := snk.Flush(ctx); err != nil {
				h.t.Fatal(err)
			}
		}
	}
}

func apply(ctx context.Context, snk sink.Sink, it Item) error {
	var err error
	switch r := it.Rec.(type) {
	case *events.MetaRecord:
		var m *events.ResourceMeta
		if m, err = r.Meta(); err == nil {
			_, err = snk.ApplyMeta(ctx, it.Model, m)
		}
	case *events.RevisionRecord:
		var res *events.RawResource
		if res, err = r.Resource(); err == nil {
			_, err = snk.ApplyRevision(ctx, it.Model, res)
		}
	case *events.BlobRecord, *events.BlobRefRecord:
		id := dedup.FileID(it.Blob)
		_, err = snk.ApplyBlob(ctx, id, int64(len(it.Blob)), "application/octet-stream", bytes.NewReader(it.Blob))
	case *events.PurgeRecord:
		_, err = snk.ApplyPurge(ctx, it.Model, r.ResourceID, r.PurgedTime)
	default:
		err = fmt.Errorf("a %s record", it.Rec.Tag())
	}
	return err
}
