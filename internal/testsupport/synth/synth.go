// Package synth writes synthetic archives shaped like SpecStar's own dumps
// (a meta, then its revisions, per resource; valid data_hashes and
// current revisions), for benchmarks and load tests that need more records
// than the fixtures hold.
package synth

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
)

// Spec sizes a synthetic archive.
type Spec struct {
	Models               int             // model sections, named model0, model1, ...
	Resources            int             // resources per model
	RevisionsPerResource int             // revisions per resource
	PayloadSize          int             // approximate payload bytes
	Encoding             events.Encoding // payload encoding
	Seed                 uint64
}

// Stats is what was written.
type Stats struct {
	Revisions int
	Metas     int
	Bytes     int64
}

// UUID returns a random version-4 UUID string from rng.
func UUID(rng *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Payload encodes a user Struct of about size bytes, as SpecStar would
// store it.
func Payload(enc events.Encoding, n int, size int) []byte {
	body := strings.Repeat("x", max(size-60, 0))
	p, err := events.EncodeValue(enc, events.Struct{Declared: 3, Fields: []events.StructField{
		{Name: "title", Value: fmt.Sprintf("item %d", n)},
		{Name: "number", Value: int64(n)},
		{Name: "body", Value: body},
	}})
	if err != nil {
		panic(err) // unreachable: the value holds only str and int
	}
	return p
}

// Write writes a complete archive to w.
func Write(w io.Writer, spec Spec) (Stats, error) {
	rng := rand.New(rand.NewPCG(spec.Seed, 1))
	aw := acbak.NewWriter(w)
	var st Stats
	base := time.Date(2024, 3, 1, 9, 0, 0, 0, time.UTC)
	put := func(r events.Record) error { return aw.Write(r) }
	if err := put(&events.HeaderRecord{Version: events.FormatVersion}); err != nil {
		return st, err
	}
	for m := 0; m < spec.Models; m++ {
		model := fmt.Sprintf("model%d", m)
		if err := put(&events.ModelStartRecord{ModelName: model}); err != nil {
			return st, err
		}
		for r := 0; r < spec.Resources; r++ {
			rid := model + ":" + UUID(rng)
			created := events.Time{Time: base.Add(time.Duration(r) * time.Second)}
			nrev := spec.RevisionsPerResource
			updated := events.Time{Time: created.Add(time.Duration(nrev) * time.Millisecond)}
			meta := &events.ResourceMeta{
				CurrentRevisionID: fmt.Sprintf("%s:%d", rid, nrev), ResourceID: rid,
				SchemaVersion: events.Null[string](), TotalRevisionCount: int64(nrev),
				CreatedTime: created, UpdatedTime: updated, CreatedBy: "bench", UpdatedBy: "bench",
				IndexedData: events.Some[events.Value](events.Map{}),
			}
			md, err := meta.Encode(events.Msgpack)
			if err != nil {
				return st, err
			}
			if err := put(&events.MetaRecord{Data: md}); err != nil {
				return st, err
			}
			st.Metas++
			for n := 1; n <= nrev; n++ {
				payload := Payload(spec.Encoding, r*nrev+n, spec.PayloadSize)
				parent := events.Null[string]()
				if n > 1 {
					parent = events.Some(fmt.Sprintf("%s:%d", rid, n-1))
				}
				t := events.Time{Time: created.Add(time.Duration(n) * time.Millisecond)}
				raw := &events.RawResource{Info: events.RevisionInfo{
					UID: UUID(rng), ResourceID: rid, RevisionID: fmt.Sprintf("%s:%d", rid, n),
					ParentRevisionID: parent, SchemaVersion: events.Null[string](),
					DataHash: events.Some(dedup.DataHash(payload)), Status: "stable",
					CreatedTime: t, UpdatedTime: t, CreatedBy: "bench", UpdatedBy: "bench",
				}, RawData: payload}
				rd, err := raw.Encode(events.Msgpack)
				if err != nil {
					return st, err
				}
				if err := put(&events.RevisionRecord{Data: rd}); err != nil {
					return st, err
				}
				st.Revisions++
			}
		}
		if err := put(&events.ModelEndRecord{ModelName: model}); err != nil {
			return st, err
		}
	}
	if err := put(&events.EofRecord{}); err != nil {
		return st, err
	}
	if err := aw.Close(); err != nil {
		return st, err
	}
	st.Bytes = aw.Offset()
	return st, nil
}
