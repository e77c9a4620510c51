package events

import (
	"strings"
	"testing"
	"time"
)

func TestPurgeRoundTrip(t *testing.T) {
	aware := Time{Time: time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)}
	naive := Time{Time: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC), Naive: true}
	for _, tc := range []struct {
		name string
		rec  PurgeRecord
		json string
	}{
		{"aware", PurgeRecord{ResourceID: "issue-1", PurgedTime: aware},
			`{"t":"PurgeRecord","resource_id":"issue-1","purged_time":"2024-05-06T07:08:09.123456Z"}`},
		{"naive", PurgeRecord{ResourceID: "r/2", PurgedTime: naive},
			`{"t":"PurgeRecord","resource_id":"r/2","purged_time":"2024-05-06T07:08:09"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.rec.Encode(Msgpack)
			if err != nil {
				t.Fatal(err)
			}
			if tag, err := PeekTag(Msgpack, b); err != nil || tag != TagPurge {
				t.Fatalf("PeekTag = %q, %v", tag, err)
			}
			got, err := DecodePurge(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.ResourceID != tc.rec.ResourceID || !got.PurgedTime.Equal(tc.rec.PurgedTime.Time) || got.PurgedTime.Naive != tc.rec.PurgedTime.Naive {
				t.Fatalf("round trip: %+v, want %+v", got, tc.rec)
			}
			js, err := tc.rec.Encode(JSON)
			if err != nil || string(js) != tc.json {
				t.Fatalf("JSON = %s, %v; want %s", js, err, tc.json)
			}
			back, err := DecodePurgeAs(JSON, js)
			if err != nil || back.ResourceID != tc.rec.ResourceID || back.PurgedTime.Format() != tc.rec.PurgedTime.Format() {
				t.Fatalf("JSON round trip: %+v, %v", back, err)
			}
			// A SpecStar-style reader sees an unknown tag and passes it through.
			rec, err := DecodeRecord(Msgpack, b)
			if err != nil {
				t.Fatal(err)
			}
			if u, ok := rec.(*UnknownRecord); !ok || u.RecordTag != TagPurge || string(u.Raw) != string(b) {
				t.Fatalf("DecodeRecord gave %T %+v", rec, rec)
			}
		})
	}
}

func TestPurgeDecodeErrors(t *testing.T) {
	b, _ := (&BlobRefRecord{FileID: "x", Bucket: "b"}).Encode(Msgpack)
	if _, err := DecodePurge(b); err == nil {
		t.Fatal("DecodePurge accepted a BlobRefRecord")
	}
	if _, err := DecodePurgeAs(JSON, []byte(`{"t":"PurgeRecord","resource_id":"a"}`)); err == nil || !strings.Contains(err.Error(), "purged_time") {
		t.Fatalf("missing purged_time: %v", err)
	}
}

func TestPurgeEnvelope(t *testing.T) {
	at := Time{Time: time.Date(2024, 5, 6, 7, 8, 9, 0, time.FixedZone("", 2*3600))}
	rec := &PurgeRecord{ResourceID: "issue-1", PurgedTime: at}
	e, err := EnvelopeFor("specstar", "my.model", rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Subject != "specstar.my%2Emodel.purge" || e.Kind != KindPurge {
		t.Fatalf("subject %q kind %q", e.Subject, e.Kind)
	}
	if e.Headers[HeaderResourceID] != "issue-1" || e.Headers[HeaderTag] != TagPurge || e.Headers[HeaderKind] != KindPurge || e.Headers[HeaderModel] != "my.model" {
		t.Fatalf("headers %v", e.Headers)
	}
	id := e.Headers[HeaderMsgID]
	if !strings.HasPrefix(id, KindPurge+"-") {
		t.Fatalf("msg id %q", id)
	}
	// The id survives a trip through the wire (msgpack keeps the instant in UTC).
	dec, err := DecodePurge(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := EnvelopeFor("specstar", "my.model", dec, e.Payload)
	if e2.Headers[HeaderMsgID] != id {
		t.Fatalf("id changed after round trip: %s vs %s", e2.Headers[HeaderMsgID], id)
	}
	later := &PurgeRecord{ResourceID: "issue-1", PurgedTime: Time{Time: at.Add(time.Second)}}
	other := &PurgeRecord{ResourceID: "issue-2", PurgedTime: at}
	for name, r := range map[string]*PurgeRecord{"later": later, "other resource": other} {
		e3, _ := EnvelopeFor("specstar", "my.model", r, nil)
		if e3.Headers[HeaderMsgID] == id {
			t.Errorf("%s: same id %s", name, id)
		}
	}
	e4, _ := EnvelopeFor("specstar", "other", rec, nil)
	if e4.Headers[HeaderMsgID] == id {
		t.Error("ids must differ across models")
	}
}
