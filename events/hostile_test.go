package events

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// firstRecords returns the first MetaRecord and RevisionRecord of
// small.acbak, decoded.
func firstRecords(t *testing.T) (*ResourceMeta, *RawResource) {
	t.Helper()
	data := testfixtures.Read(t, "small.acbak")
	var meta *ResourceMeta
	var res *RawResource
	for len(data) >= 4 && (meta == nil || res == nil) {
		size := binary.BigEndian.Uint32(data)
		payload := data[4 : 4+size]
		data = data[4+size:]
		rec, err := DecodeRecord(Msgpack, payload)
		if err != nil {
			t.Fatal(err)
		}
		switch r := rec.(type) {
		case *MetaRecord:
			if meta == nil {
				if meta, err = r.Meta(); err != nil {
					t.Fatal(err)
				}
			}
		case *RevisionRecord:
			if res == nil {
				if res, err = r.Resource(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return meta, res
}

func envelopeID(t *testing.T, rec Record) string {
	t.Helper()
	e, err := EnvelopeFor("specstar", "issue", rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.Headers[HeaderMsgID]
}

// TestMessageIDsCoverContent (issue 12, item 6): two metas alike in
// resource, updated_time, revision count and current revision but not in
// is_deleted, or two revisions alike in uid, hash and schema version but
// not in their bytes, must not share a message id, or JetStream drops the
// second as a duplicate and the result depends on order.
func TestMessageIDsCoverContent(t *testing.T) {
	meta, res := firstRecords(t)

	metaRec := func(m *ResourceMeta) Record {
		b, err := m.Encode(Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		return &MetaRecord{Data: b}
	}
	deleted := *meta
	deleted.IsDeleted = !meta.IsDeleted
	if a, b := envelopeID(t, metaRec(meta)), envelopeID(t, metaRec(&deleted)); a == b {
		t.Errorf("metas differing only in is_deleted share message id %s", a)
	}

	revRec := func(r *RawResource) Record {
		b, err := r.Encode(Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		return &RevisionRecord{Data: b}
	}
	other := *res
	other.RawData = append(bytes.Clone(res.RawData), ' ')
	if a, b := envelopeID(t, revRec(res)), envelopeID(t, revRec(&other)); a == b {
		t.Errorf("revisions differing only in their bytes share message id %s", a)
	}

	// The same record twice keeps one id: replays stay deduplicated.
	if a, b := envelopeID(t, metaRec(meta)), envelopeID(t, metaRec(meta)); a != b {
		t.Errorf("the same meta got ids %s and %s", a, b)
	}
}

// TestTimestampsOutsidePythonRange (issue 12, item 8): a msgpack
// timestamp Python's datetime cannot hold (year 10000 or later, before
// year 1, seconds near 2^62) is refused at decode time with the reason,
// instead of being stored as "10000-01-01T00:00:00Z" that neither
// SpecStar nor our reader can decode.
func TestTimestampsOutsidePythonRange(t *testing.T) {
	ts := func(sec int64) []byte {
		b := make([]byte, 12)
		binary.BigEndian.PutUint64(b[4:], uint64(sec))
		return b
	}
	for _, tc := range []struct {
		name string
		sec  int64
		ok   bool
	}{
		{"year 1", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), true},
		{"year 9999 end", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix(), true},
		{"year 10000", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), false},
		{"year 0", time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC).Unix(), false},
		{"negative year", time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), false},
		{"near 2^62", 1 << 62, false},
		{"near -2^62", -(1 << 62), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As a struct field: a ResourceMeta whose updated_time (a
			// 64-bit timestamp, 2001-09-09T01:46:40.5Z) is swapped for a
			// 96-bit one holding the instant under test.
			meta, _ := firstRecords(t)
			const sec0, nsec0 = 1_000_000_000, 500_000_000
			meta.UpdatedTime = Time{Time: time.Unix(sec0, nsec0).UTC()}
			enc, err := meta.Encode(Msgpack)
			if err != nil {
				t.Fatal(err)
			}
			old := make([]byte, 10)
			old[0], old[1] = 0xd7, 0xff
			binary.BigEndian.PutUint64(old[2:], uint64(nsec0)<<34|sec0)
			i := bytes.Index(enc, old)
			if i < 0 {
				t.Fatalf("cannot find updated_time's encoding % x in the meta", old)
			}
			want := time.Unix(tc.sec, 0).UTC()
			body := ts(tc.sec)
			patched := append(append(append([]byte{}, enc[:i]...), append([]byte{0xc7, 12, 0xff}, body...)...), enc[i+len(old):]...)
			got, err := DecodeResourceMeta(Msgpack, patched)
			if tc.ok {
				if err != nil || !got.UpdatedTime.Instant().Equal(want) {
					t.Fatalf("decode: %v, %v; want %v", err, got, want)
				}
				return
			}
			if err == nil {
				t.Fatalf("a timestamp at %d s decoded as %v", tc.sec, got.UpdatedTime)
			}
			if !strings.Contains(err.Error(), "Python's datetime range") {
				t.Fatalf("error does not give the reason: %v", err)
			}
			// Inside an Any value (indexed_data), the same.
			if _, err := DecodeValue(Msgpack, append([]byte{0xc7, 12, 0xff}, body...)); err == nil {
				t.Fatalf("an Any value with a timestamp at %d s decoded", tc.sec)
			}
		})
	}
}

// TestParseSubjectRoundTrips: every model, however hostile, comes back
// from its event's subject exactly (the consumer's side of item 5).
func TestParseSubjectRoundTrips(t *testing.T) {
	for _, model := range []string{"issue", "issue ", " issue", "issue\t", "iss\nue", "a.b", "*", ">", "%", "", "模型", "x%41"} {
		for _, kind := range []string{KindMeta, KindRevision, KindBlob, KindPurge, KindOther} {
			got, k, err := ParseSubject("specstar", Subject("specstar", model, kind))
			if err != nil || got != model || k != kind {
				t.Errorf("ParseSubject(Subject(%q, %q)) = %q, %q, %v", model, kind, got, k, err)
			}
		}
	}
	for _, bad := range []string{"other.issue.meta", "specstar.issue", "specstar.issue.meta.x", "specstar.%ZZ.meta"} {
		if _, _, err := ParseSubject("specstar", bad); err == nil {
			t.Errorf("ParseSubject(%q) accepted it", bad)
		}
	}
}

// TestDecodingBombIsRefused (issue 12, item 9): a MetaRecord whose
// indexed_data is a list of N one-byte items decoded into a []any of N
// interfaces: a 64 MiB frame took 3 GB, and 150 metas of 900 KB pushed
// `replicator mirror` to 2.4 GB. Decoding now stops, with the reason,
// once a record holds far more values than its size allows, so the
// memory it takes stays a small multiple of its bytes; ordinary metas
// decode as before.
func TestDecodingBombIsRefused(t *testing.T) {
	meta, _ := firstRecords(t)
	const n = 4 << 20
	items := make([]any, n)
	for i := range items {
		items[i] = int64(1)
	}
	bomb := *meta
	bomb.IndexedData = Some[Value](Map{{Key: "pad", Value: items}})
	data, err := bomb.Encode(Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	items = nil
	bomb.IndexedData = Opt[Value]{}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = DecodeResourceMeta(Msgpack, data)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "values in") {
		t.Fatalf("a %d-byte meta with %d one-byte items decoded: %v", len(data), n, err)
	}
	if used, limit := after.TotalAlloc-before.TotalAlloc, uint64(8*len(data)); used > limit {
		t.Errorf("refusing it allocated %d MiB for a %d MiB record, want at most %d MiB", used>>20, len(data)>>20, limit>>20)
	}

	// A list of 100,000 small ints in indexed_data still decodes.
	ok := *meta
	list := make([]any, 100_000)
	for i := range list {
		list[i] = int64(i % 100)
	}
	ok.IndexedData = Some[Value](Map{{Key: "tags", Value: list}})
	if data, err = ok.Encode(Msgpack); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeResourceMeta(Msgpack, data); err != nil {
		t.Fatalf("a meta with a 100,000-item list: %v", err)
	}
	// And in JSON, the same budget.
	bombJSON := []byte(`{"current_revision_id":"a:1","resource_id":"a","total_revision_count":1,"created_time":"2024-01-01T00:00:00Z",` +
		`"updated_time":"2024-01-01T00:00:00Z","created_by":"x","updated_by":"x","indexed_data":{"pad":[` + strings.Repeat("1,", n) + `1]}}`)
	if _, err := DecodeResourceMeta(JSON, bombJSON); err == nil || !strings.Contains(err.Error(), "values in") {
		t.Fatalf("a JSON meta with %d one-byte items decoded: %v", n, err)
	}
}

// TestEnvelopeRefusesNamesNoMessageCanCarry (issue 26, item 3): a model
// whose escaped name exceeds the NATS protocol line, or an id larger than
// the 64 KiB JetStream allows for headers, failed only at publish
// ("maximum control line exceeded", "header size exceeds 64k"). EnvelopeFor
// must refuse them with the bound, quoting the name in bounded form; names
// at the bounds pass.
func TestEnvelopeRefusesNamesNoMessageCanCarry(t *testing.T) {
	purge := func(rid string) *PurgeRecord { return &PurgeRecord{ResourceID: rid} }
	for _, tc := range []struct {
		model, rid, want string
	}{
		{strings.Repeat("m", MaxModelToken), strings.Repeat("r", MaxIDBytes), ""},
		{strings.Repeat("é", 700), "r", "a subject may carry"},
		{"m", strings.Repeat("\x01", 200<<10), "an event header may carry"},
	} {
		_, err := EnvelopeFor("specstar", tc.model, purge(tc.rid), nil)
		if tc.want == "" {
			if err != nil {
				t.Errorf("names at the bounds refused: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EnvelopeFor: %v, want an error saying %q", err, tc.want)
		} else if len(err.Error()) > 512 {
			t.Errorf("an error of %d bytes: the name must be quoted bounded", len(err.Error()))
		}
	}
}

// TestDecodedTreeIsASmallMultipleOfTheRecord (issue 26, item 8): at one
// value per 4 bytes, a meta whose indexed_data is a list of 3-byte strings
// stayed within the node budget and decoded into ten times its size
// (writer verify of a 250 MiB frame peaked at 2.96 GB). Decoding it,
// or refusing it, must allocate at most four times the record.
func TestDecodedTreeIsASmallMultipleOfTheRecord(t *testing.T) {
	meta, _ := firstRecords(t)
	const n = 4 << 20
	items := make([]any, n)
	for i := range items {
		items[i] = "abc"
	}
	big := *meta
	big.IndexedData = Some[Value](Map{{Key: "pad", Value: items}})
	data, err := big.Encode(Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	items = nil
	big.IndexedData = Opt[Value]{}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = DecodeResourceMeta(Msgpack, data)
	runtime.ReadMemStats(&after)
	if used, limit := after.TotalAlloc-before.TotalAlloc, uint64(4*len(data)); used > limit {
		t.Errorf("decoding a %d MiB meta of 3-byte strings allocated %d MiB (err %v), want at most %d MiB", len(data)>>20, used>>20, err, limit>>20)
	}
}
