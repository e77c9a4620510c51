package events

import (
	"encoding/hex"

	"github.com/zeebo/xxh3"
)

// TagRecordRef is this project's own additive record tag: a record (a
// meta, a revision, or a tag we do not know) too large for one message,
// whose exact payload is in the JetStream object store. SpecStar readers
// skip it as an unknown tag; it never appears in archives we write.
const TagRecordRef = "RecordRefRecord"

// RecordRefRecord stands for the record whose msgpack payload (Size
// bytes) is the object Object of bucket Bucket; RecordTag is that
// record's tag, so consumers can route it before fetching it.
type RecordRefRecord struct {
	RecordTag string
	Object    string
	Size      int64
	Bucket    string
	Unknown   Unknown
}

// Tag implements Record.
func (*RecordRefRecord) Tag() string { return TagRecordRef }

var recordRefSchema = newSchema(TagRecordRef, TagRecordRef,
	strField("tag", func(v *RecordRefRecord) *string { return &v.RecordTag }),
	strField("object", func(v *RecordRefRecord) *string { return &v.Object }),
	intField("size", func(v *RecordRefRecord) *int64 { return &v.Size }),
	strField("bucket", func(v *RecordRefRecord) *string { return &v.Bucket }),
)

// Encode implements Record.
func (r *RecordRefRecord) Encode(enc Encoding) ([]byte, error) {
	return recordRefSchema.encode(enc, r, &r.Unknown)
}

// DecodeRecordRef decodes a RecordRefRecord payload.
func DecodeRecordRef(payload []byte) (*RecordRefRecord, error) {
	v := &RecordRefRecord{}
	return v, recordRefSchema.decode(Msgpack, payload, v, &v.Unknown)
}

// RecordObjectName is the object-store name of a record payload: its
// content address, in a namespace of its own beside the blobs' file_ids,
// so the same record put twice is stored once and a consumer can check
// what it fetched.
func RecordObjectName(payload []byte) string {
	sum := xxh3.Hash128(payload).Bytes()
	return "record-" + hex.EncodeToString(sum[:])
}
