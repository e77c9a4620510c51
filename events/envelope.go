package events

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// This file maps records onto messages: subject, headers and the
// deterministic message id JetStream deduplicates on. It knows nothing of
// NATS itself.

// Record kinds, the last token of an event's subject.
const (
	KindMeta     = "meta"
	KindRevision = "rev"
	KindBlob     = "blob"
	KindOther    = "x" // unknown tags, passed through unchanged
)

// Message headers every event carries.
const (
	HeaderMsgID      = "Nats-Msg-Id" // JetStream's de-duplication key
	HeaderModel      = "Specstar-Model"
	HeaderKind       = "Specstar-Kind"
	HeaderTag        = "Specstar-Tag"
	HeaderResourceID = "Specstar-Resource-Id"
	HeaderRevisionID = "Specstar-Revision-Id"
	HeaderFileID     = "Specstar-File-Id"
)

// TagBlobRef is this project's own additive record tag: a blob too large
// for one message, whose bytes are in the JetStream object store under its
// file_id. SpecStar readers skip it as an unknown tag.
const TagBlobRef = "BlobRefRecord"

// BlobRefRecord stands for a BlobRecord whose bytes travel in the object
// store bucket Bucket under the name FileID.
type BlobRefRecord struct {
	FileID      string
	Size        int64
	ContentType string
	Bucket      string
	Unknown     Unknown
}

// Tag implements Record.
func (*BlobRefRecord) Tag() string { return TagBlobRef }

var blobRefSchema = newSchema(TagBlobRef, TagBlobRef,
	strField("file_id", func(v *BlobRefRecord) *string { return &v.FileID }),
	intField("size", func(v *BlobRefRecord) *int64 { return &v.Size }),
	withDefault(strField("content_type", func(v *BlobRefRecord) *string { return &v.ContentType }),
		func(v *BlobRefRecord) { v.ContentType = "" }),
	strField("bucket", func(v *BlobRefRecord) *string { return &v.Bucket }),
)

// Encode implements Record.
func (r *BlobRefRecord) Encode(enc Encoding) ([]byte, error) {
	return blobRefSchema.encode(enc, r, &r.Unknown)
}

// DecodeBlobRef decodes a BlobRefRecord payload (DecodeRecord leaves our
// own tags to their owners, as any tolerant SpecStar reader would).
func DecodeBlobRef(payload []byte) (*BlobRefRecord, error) {
	v := &BlobRefRecord{}
	return v, blobRefSchema.decode(Msgpack, payload, v, &v.Unknown)
}

// SubjectToken encodes an arbitrary string (a model name) as one NATS
// subject token that cannot add tokens or wildcards: bytes outside
// [A-Za-z0-9_-] become %XX (upper-case hex), "%" included, and the empty
// string becomes a lone "%". The mapping is injective and reversible.
func SubjectToken(s string) string {
	if s == "" {
		return "%"
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// ParseSubjectToken reverses SubjectToken.
func ParseSubjectToken(tok string) (string, error) {
	if tok == "%" {
		return "", nil
	}
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		if tok[i] != '%' {
			b.WriteByte(tok[i])
			continue
		}
		if i+2 >= len(tok) {
			return "", fmt.Errorf("bad escape in subject token %q", tok)
		}
		v, err := strconv.ParseUint(tok[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape in subject token %q", tok)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// Subject is the subject of an event: PREFIX.<model token>.<kind>.
func Subject(prefix, model, kind string) string {
	return prefix + "." + SubjectToken(model) + "." + kind
}

// ParseSubject reads the model and kind back from an event's subject
// (Subject's inverse): the subject, unlike a header, carries the model
// escaped, so consumers take the model from here. Headers are trimmed and
// rewritten by the NATS client ("issue " arrives as "issue").
func ParseSubject(prefix, subject string) (model, kind string, err error) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return "", "", fmt.Errorf("subject %q is not below %q", subject, prefix)
	}
	tok, kind, ok := strings.Cut(rest, ".")
	if !ok || kind == "" || strings.Contains(kind, ".") {
		return "", "", fmt.Errorf("subject %q is not %s.<model>.<kind>", subject, prefix)
	}
	if model, err = ParseSubjectToken(tok); err != nil {
		return "", "", fmt.Errorf("subject %q: %w", subject, err)
	}
	return model, kind, nil
}

// Envelope is a record ready to publish: where it goes, its headers and
// its payload (the exact msgpack of one archive frame).
type Envelope struct {
	Subject string
	Headers map[string]string
	Payload []byte
	Kind    string
}

// msgID hashes the parts of a record's identity and its payload bytes
// into a short, deterministic message id: the same record published twice
// gets the same id (JetStream drops the second), and two records that
// share an identity but differ in any byte (a meta's is_deleted, a
// revision's payload) get different ones.
func msgID(kind string, payload []byte, parts ...string) string {
	h := xxh3.New128()
	content := xxh3.Hash128(payload).Bytes()
	parts = append(parts, string(content[:]))
	for _, p := range parts {
		h.WriteString(strconv.Itoa(len(p)))
		h.WriteString(":")
		h.WriteString(p)
	}
	sum := h.Sum128().Bytes()
	return fmt.Sprintf("%s-%x", kind, sum[:])
}

// EnvelopeFor builds the envelope of one record of a model section. The
// payload is the record's msgpack encoding (for a record read from an
// archive, pass its frame bytes as payload to keep them exact; nil
// re-encodes). Ids: a revision by uid, data_hash and schema_version
// (SpecStar's migrate() keeps uid and hash but changes the version); a meta by resource id,
// updated_time, total_revision_count and current_revision_id; a blob by
// file_id; a purge by resource id and purged_time; anything else, and a
// Meta or Revision record whose data does not decode, by its bytes. All
// ids include the model and a hash of the payload, so a record differing
// in any byte is never dropped as a duplicate of another. A model or id
// longer than MaxModelToken or MaxIDBytes is refused: no message could
// carry it.
func EnvelopeFor(prefix, model string, rec Record, payload []byte) (*Envelope, error) {
	if payload == nil {
		var err error
		if payload, err = rec.Encode(Msgpack); err != nil {
			return nil, err
		}
	}
	h := map[string]string{HeaderModel: model, HeaderTag: rec.Tag()}
	var kind string
	switch r := rec.(type) {
	case *MetaRecord:
		kind = KindMeta
		meta, err := r.Meta()
		if err != nil {
			// Published all the same: the sinks dead-letter it with the
			// reason, which is where an operator looks.
			h[HeaderMsgID] = msgID(kind, payload, model)
			break
		}
		h[HeaderResourceID] = meta.ResourceID
		h[HeaderMsgID] = msgID(kind, payload, model, meta.ResourceID, meta.UpdatedTime.Format(),
			strconv.FormatInt(meta.TotalRevisionCount, 10), meta.CurrentRevisionID)
	case *RevisionRecord:
		kind = KindRevision
		res, err := r.Resource()
		if err != nil {
			h[HeaderMsgID] = msgID(kind, payload, model)
			break
		}
		h[HeaderResourceID] = res.Info.ResourceID
		h[HeaderRevisionID] = res.Info.RevisionID
		hash := res.Info.DataHash.Value
		if !res.Info.DataHash.IsSet() {
			hash = fmt.Sprintf("raw:%x", xxh3.Hash128(res.RawData).Bytes())
		}
		sv := "\x00none"
		if res.Info.SchemaVersion.IsSet() {
			sv = res.Info.SchemaVersion.Value
		}
		h[HeaderMsgID] = msgID(kind, payload, model, res.Info.UID, hash, sv)
	case *BlobRecord:
		kind = KindBlob
		h[HeaderFileID] = r.FileID
		h[HeaderMsgID] = msgID(kind, payload, model, r.FileID)
	case *BlobRefRecord:
		kind = KindBlob
		h[HeaderFileID] = r.FileID
		h[HeaderMsgID] = msgID(kind, payload, model, r.FileID)
	case *PurgeRecord:
		kind = KindPurge
		h[HeaderResourceID] = r.ResourceID
		h[HeaderMsgID] = msgID(kind, payload, model, r.ResourceID, purgeIDTime(r.PurgedTime))
	default:
		kind = KindOther
		h[HeaderMsgID] = msgID(kind, payload, model)
	}
	h[HeaderKind] = kind
	if err := checkEnvelopeNames(model, [2]string{"resource_id", h[HeaderResourceID]},
		[2]string{"revision_id", h[HeaderRevisionID]}, [2]string{"file_id", h[HeaderFileID]}); err != nil {
		return nil, fmt.Errorf("%s event: %w", kind, err)
	}
	return &Envelope{Subject: Subject(prefix, model, kind), Headers: h, Payload: payload, Kind: kind}, nil
}
