package events

import (
	"strings"
	"testing"
	"unicode"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

func TestSubjectToken(t *testing.T) {
	tests := []struct{ in, want string }{
		{"issue", "issue"},
		{"", "%"},
		{"a.b", "a%2Eb"},
		{"*", "%2A"},
		{">", "%3E"},
		{"a b", "a%20b"},
		{"%", "%25"},
		{"日", "%E6%97%A5"},
		{"user-v2_x", "user-v2_x"},
	}
	for _, tc := range tests {
		if got := SubjectToken(tc.in); got != tc.want {
			t.Errorf("SubjectToken(%q) = %q, want %q", tc.in, got, tc.want)
		}
		back, err := ParseSubjectToken(tc.want)
		if err != nil || back != tc.in {
			t.Errorf("ParseSubjectToken(%q) = %q, %v", tc.want, back, err)
		}
	}
	for _, bad := range []string{"%4", "%ZZ", "a%"} {
		if _, err := ParseSubjectToken(bad); err == nil {
			t.Errorf("ParseSubjectToken(%q) accepted", bad)
		}
	}
}

func FuzzSubjectToken(f *testing.F) {
	for _, s := range []string{"issue", "", "a.b.>", "*", "日本語", "%25"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := SubjectToken(s)
		if tok == "" || strings.ContainsAny(tok, ".*>") || strings.ContainsFunc(tok, unicode.IsSpace) {
			t.Fatalf("%q -> unsafe token %q", s, tok)
		}
		back, err := ParseSubjectToken(tok)
		if err != nil || back != s {
			t.Fatalf("%q -> %q -> %q, %v", s, tok, back, err)
		}
	})
}

// TestEnvelopeIDs: the same record always gets the same message id, and
// records that differ in their content identity get different ones.
func TestEnvelopeIDs(t *testing.T) {
	data := testfixtures.Read(t, "small.acbak")
	ids := map[string]string{}
	n := 0
	for len(data) >= 4 {
		size := int(data[0])<<24 | int(data[1])<<16 | int(data[2])<<8 | int(data[3])
		payload := data[4 : 4+size]
		data = data[4+size:]
		rec, err := DecodeRecord(Msgpack, payload)
		if err != nil {
			t.Fatal(err)
		}
		switch rec.(type) {
		case *MetaRecord, *RevisionRecord:
		default:
			continue
		}
		e1, err := EnvelopeFor("specstar", "issue", rec, payload)
		if err != nil {
			t.Fatal(err)
		}
		e2, _ := EnvelopeFor("specstar", "issue", rec, nil)
		if e1.Headers[HeaderMsgID] != e2.Headers[HeaderMsgID] || string(e1.Payload) != string(e2.Payload) {
			t.Fatalf("envelope not deterministic for %s", rec.Tag())
		}
		if prev, dup := ids[e1.Headers[HeaderMsgID]]; dup {
			t.Fatalf("two different records share id %s (%s)", e1.Headers[HeaderMsgID], prev)
		}
		ids[e1.Headers[HeaderMsgID]] = rec.Tag()
		if e1.Subject != "specstar.issue."+e1.Kind || e1.Headers[HeaderResourceID] == "" {
			t.Fatalf("subject %s headers %v", e1.Subject, e1.Headers)
		}
		n++
	}
	if n != 16 {
		t.Fatalf("saw %d meta/revision records, want 16", n)
	}
	other, _ := EnvelopeFor("specstar", "other", &BlobRecord{FileID: "x"}, nil)
	same, _ := EnvelopeFor("specstar", "issue", &BlobRecord{FileID: "x"}, nil)
	if other.Headers[HeaderMsgID] == same.Headers[HeaderMsgID] {
		t.Fatal("ids must differ across models, so per-model consumers each get the blob")
	}
}

func TestBlobRefRoundTrip(t *testing.T) {
	r := &BlobRefRecord{FileID: "64d2f845e7abbc3eaffacd9148e270be", Size: 70000, ContentType: "", Bucket: "SPECSTAR_BLOBS"}
	b, err := r.Encode(Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := PeekTag(Msgpack, b)
	got, err := DecodeBlobRef(b)
	if err != nil || tag != TagBlobRef || got.FileID != r.FileID || got.Size != r.Size || got.Bucket != r.Bucket {
		t.Fatalf("round trip: tag %q %+v %v", tag, got, err)
	}
	// A SpecStar-style reader sees an unknown tag and passes it through.
	rec, _ := DecodeRecord(Msgpack, b)
	if _, ok := rec.(*UnknownRecord); !ok {
		t.Fatalf("DecodeRecord gave %T", rec)
	}
}
