// Package sinktestutil holds the test helpers the sink backends' tests
// share (reading a fixture archive into records, building metas and
// revisions, picking a resource to purge), so each backend's tests can
// move with its code without copying them.
package sinktestutil

import (
	"fmt"
	"os"
	"testing"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
)

// Record is one Meta, Revision or Blob record of an archive, decoded: what
// the backends' tests apply.
type Record struct {
	Model string
	Raw   []byte // the record's data (MetaRecord.Data, RevisionRecord.Data)
	Meta  *events.ResourceMeta
	Rev   *events.RawResource
	Blob  *events.BlobRecord
}

// ReadArchiveFile reads the Meta, Revision and Blob records of an archive,
// the reference data every backend is tested against.
func ReadArchiveFile(t testing.TB, path string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	var recs []Record
	model := ""
	for fr, err := range acbak.NewReader(f, acbak.Options{Size: st.Size()}).All() {
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch r := fr.Record.(type) {
		case *events.ModelStartRecord:
			model = r.ModelName
		case *events.MetaRecord:
			m, err := r.Meta()
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, Record{Model: model, Raw: r.Data, Meta: m})
		case *events.RevisionRecord:
			res, err := r.Resource()
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, Record{Model: model, Raw: r.Data, Rev: res})
		case *events.BlobRecord:
			recs = append(recs, Record{Model: model, Blob: r})
		}
	}
	return recs
}

// MustTime parses a test's timestamp.
func MustTime(t testing.TB, s string) events.Time {
	t.Helper()
	tm, err := events.ParseTime(s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// Meta is a meta of resource rid at revision count, updated at updated by
// by, for the ordering tests of every meta store.
func Meta(t testing.TB, rid, updated string, count int64, by string) *events.ResourceMeta {
	return &events.ResourceMeta{
		CurrentRevisionID:  fmt.Sprintf("%s:%d", rid, count),
		ResourceID:         rid,
		SchemaVersion:      events.Null[string](),
		TotalRevisionCount: count,
		CreatedTime:        MustTime(t, "2024-01-01T00:00:00Z"),
		UpdatedTime:        MustTime(t, updated),
		CreatedBy:          "alice",
		UpdatedBy:          by,
		IndexedData:        events.Some[events.Value](events.Map{{Key: "title", Value: "t"}}),
	}
}

// Revision is revision rev of resource rid with the given uid, schema
// versions, time and payload, for the replay tests of every resource store.
func Revision(t testing.TB, rid, rev, uid string, sv, parentSV events.Opt[string], updated string, data string) *events.RawResource {
	return &events.RawResource{
		Info: events.RevisionInfo{
			UID:                 uid,
			ResourceID:          rid,
			RevisionID:          rev,
			ParentRevisionID:    events.Null[string](),
			ParentSchemaVersion: parentSV,
			SchemaVersion:       sv,
			DataHash:            events.Some(dedup.DataHash([]byte(data))),
			Status:              "stable",
			CreatedTime:         MustTime(t, "2024-01-01T00:00:00Z"),
			UpdatedTime:         MustTime(t, updated),
			CreatedBy:           "alice",
			UpdatedBy:           "alice",
		},
		RawData: []byte(data),
	}
}

// Enc is a meta's msgpack encoding, to compare metas byte for byte.
func Enc(t testing.TB, m *events.ResourceMeta) []byte {
	t.Helper()
	b, err := m.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PurgeTarget picks the resource of an archive with the most revisions and
// returns its model, meta and the uids of its revisions, for the purge
// tests of every backend.
func PurgeTarget(t testing.TB, recs []Record) (string, *events.ResourceMeta, map[string]bool) {
	t.Helper()
	count := map[string]int{}
	for _, r := range recs {
		if r.Rev != nil {
			count[r.Model+"\x00"+r.Rev.Info.ResourceID]++
		}
	}
	var (
		model string
		meta  *events.ResourceMeta
	)
	for _, r := range recs {
		if r.Meta != nil && (meta == nil || count[r.Model+"\x00"+r.Meta.ResourceID] > count[model+"\x00"+meta.ResourceID]) {
			model, meta = r.Model, r.Meta
		}
	}
	if meta == nil || count[model+"\x00"+meta.ResourceID] == 0 {
		t.Fatal("archive has no resource with revisions")
	}
	uids := map[string]bool{}
	for _, r := range recs {
		if r.Rev != nil && r.Model == model && r.Rev.Info.ResourceID == meta.ResourceID {
			uids[r.Rev.Info.UID] = true
		}
	}
	return model, meta, uids
}
