package events

// TagPurge is this project's own additive record tag: a resource was
// permanently deleted at the source (its meta row is gone). SpecStar
// readers skip it as an unknown tag.
const TagPurge = "PurgeRecord"

// KindPurge is the subject kind of purge events, so consumers can filter
// permanent deletes apart from metas and revisions.
const KindPurge = "purge"

// PurgeRecord tells the sinks that a resource was permanently deleted at
// PurgedTime, so they remove its meta, revisions and payloads.
type PurgeRecord struct {
	ResourceID string
	PurgedTime Time
	Unknown    Unknown
}

// Tag implements Record.
func (*PurgeRecord) Tag() string { return TagPurge }

var purgeSchema = newSchema(TagPurge, TagPurge,
	strField("resource_id", func(v *PurgeRecord) *string { return &v.ResourceID }),
	timeField("purged_time", func(v *PurgeRecord) *Time { return &v.PurgedTime }),
)

// Encode implements Record.
func (r *PurgeRecord) Encode(enc Encoding) ([]byte, error) {
	return purgeSchema.encode(enc, r, &r.Unknown)
}

// DecodePurge decodes a msgpack PurgeRecord payload (DecodeRecord leaves
// our own tags to their owners, as any tolerant SpecStar reader would).
func DecodePurge(payload []byte) (*PurgeRecord, error) {
	v := &PurgeRecord{}
	return v, purgeSchema.decode(Msgpack, payload, v, &v.Unknown)
}

// DecodePurgeAs decodes a PurgeRecord payload in either encoding, for
// tools that read JSON events.
func DecodePurgeAs(enc Encoding, payload []byte) (*PurgeRecord, error) {
	v := &PurgeRecord{}
	return v, purgeSchema.decode(enc, payload, v, &v.Unknown)
}

// purgeIDTime formats a purge time for its message id so that an encode
// and decode round trip keeps the id: msgpack stores an aware instant as
// UTC, so aware times are formatted in UTC; naive ones as they are.
func purgeIDTime(t Time) string {
	if !t.Naive {
		t.Time = t.Time.UTC()
	}
	return t.Format()
}
