package events

// Record tags: msgspec tagged-union tags, equal to the upstream class names.
const (
	TagHeader     = "HeaderRecord"
	TagModelStart = "ModelStartRecord"
	TagMeta       = "MetaRecord"
	TagRevision   = "RevisionRecord"
	TagBlob       = "BlobRecord"
	TagModelEnd   = "ModelEndRecord"
	TagEOF        = "EofRecord"
)

// FormatVersion is the archive format version this package reads and writes.
const FormatVersion = 2

// Record is one DumpRecord: one frame of an .acbak archive and the payload
// of one event on the stream.
type Record interface {
	// Tag is the value of the "t" field that selects the record type.
	Tag() string
	// Encode writes the record as SpecStar does (archives use Msgpack).
	Encode(enc Encoding) ([]byte, error)
}

// HeaderRecord opens an archive and names its format version.
type HeaderRecord struct {
	Version int64 // = 2
	Unknown Unknown
}

// ModelStartRecord opens the section of one model.
type ModelStartRecord struct {
	ModelName string
	Unknown   Unknown
}

// MetaRecord carries one resource's ResourceMeta, msgpack-encoded.
type MetaRecord struct {
	Data    []byte
	Unknown Unknown
}

// RevisionRecord carries one revision as a msgpack-encoded RawResource.
type RevisionRecord struct {
	Data    []byte
	Unknown Unknown
}

// BlobRecord carries one blob inline; ContentType is "" when unknown.
type BlobRecord struct {
	FileID      string
	BlobData    []byte
	Size        int64
	ContentType string
	Unknown     Unknown
}

// ModelEndRecord closes the section of one model.
type ModelEndRecord struct {
	ModelName string
	Unknown   Unknown
}

// EofRecord ends an archive.
type EofRecord struct {
	Unknown Unknown
}

// UnknownRecord is a record whose tag this version does not know (a newer
// SpecStar's, or one of our own additive tags seen by an older reader). It
// keeps the exact payload so it can be skipped or passed through.
type UnknownRecord struct {
	RecordTag string
	Raw       []byte
}

// The Tag methods implement Record: each returns its type's tag.

func (*HeaderRecord) Tag() string     { return TagHeader }
func (*ModelStartRecord) Tag() string { return TagModelStart }
func (*MetaRecord) Tag() string       { return TagMeta }
func (*RevisionRecord) Tag() string   { return TagRevision }
func (*BlobRecord) Tag() string       { return TagBlob }
func (*ModelEndRecord) Tag() string   { return TagModelEnd }
func (*EofRecord) Tag() string        { return TagEOF }
func (r *UnknownRecord) Tag() string  { return r.RecordTag }

var (
	headerSchema = newSchema(TagHeader, TagHeader,
		withDefault(intField("version", func(v *HeaderRecord) *int64 { return &v.Version }),
			func(v *HeaderRecord) { v.Version = FormatVersion }))
	modelStartSchema = newSchema(TagModelStart, TagModelStart,
		strField("model_name", func(v *ModelStartRecord) *string { return &v.ModelName }))
	metaRecordSchema = newSchema(TagMeta, TagMeta,
		bytesField("data", func(v *MetaRecord) *[]byte { return &v.Data }))
	revisionRecordSchema = newSchema(TagRevision, TagRevision,
		bytesField("data", func(v *RevisionRecord) *[]byte { return &v.Data }))
	blobRecordSchema = newSchema(TagBlob, TagBlob,
		strField("file_id", func(v *BlobRecord) *string { return &v.FileID }),
		bytesField("blob_data", func(v *BlobRecord) *[]byte { return &v.BlobData }),
		intField("size", func(v *BlobRecord) *int64 { return &v.Size }),
		withDefault(strField("content_type", func(v *BlobRecord) *string { return &v.ContentType }),
			func(v *BlobRecord) { v.ContentType = "" }))
	modelEndSchema = newSchema(TagModelEnd, TagModelEnd,
		strField("model_name", func(v *ModelEndRecord) *string { return &v.ModelName }))
	eofSchema = newSchema[EofRecord](TagEOF, TagEOF)
)

// The Encode methods implement Record: each writes its record as msgspec
// does, tag first, unknown fields back where they stood.

func (r *HeaderRecord) Encode(enc Encoding) ([]byte, error) {
	return headerSchema.encode(enc, r, &r.Unknown)
}
func (r *ModelStartRecord) Encode(enc Encoding) ([]byte, error) {
	return modelStartSchema.encode(enc, r, &r.Unknown)
}
func (r *MetaRecord) Encode(enc Encoding) ([]byte, error) {
	return metaRecordSchema.encode(enc, r, &r.Unknown)
}
func (r *RevisionRecord) Encode(enc Encoding) ([]byte, error) {
	return revisionRecordSchema.encode(enc, r, &r.Unknown)
}
func (r *BlobRecord) Encode(enc Encoding) ([]byte, error) {
	return blobRecordSchema.encode(enc, r, &r.Unknown)
}
func (r *ModelEndRecord) Encode(enc Encoding) ([]byte, error) {
	return modelEndSchema.encode(enc, r, &r.Unknown)
}
func (r *EofRecord) Encode(enc Encoding) ([]byte, error) {
	return eofSchema.encode(enc, r, &r.Unknown)
}

// Encode returns the payload as it was read; an unknown record cannot be
// converted between encodings.
func (r *UnknownRecord) Encode(enc Encoding) ([]byte, error) {
	return r.Raw, nil
}

// Meta decodes the ResourceMeta the record carries.
func (r *MetaRecord) Meta() (*ResourceMeta, error) { return DecodeResourceMeta(Msgpack, r.Data) }

// Resource decodes the RawResource the record carries.
func (r *RevisionRecord) Resource() (*RawResource, error) { return DecodeRawResource(Msgpack, r.Data) }

// PeekTag returns the "t" field of an encoded record without decoding the
// rest. Its errors match upstream's: a payload that is not a map, or a map
// without "t".
func PeekTag(enc Encoding, payload []byte) (string, error) {
	if enc == JSON {
		r := &jsReader{b: payload}
		if err := r.objectStart(); err != nil {
			return "", wrapRecord(err)
		}
		for first := true; ; first = false {
			k, more, err := r.nextKey(first)
			if err != nil {
				return "", wrapRecord(err)
			}
			if !more {
				return "", wrapRecord(r.errf("object missing required field `t`"))
			}
			if k == "t" {
				t, err := r.str()
				return t, wrapRecord(err)
			}
			if _, err := r.skip(); err != nil {
				return "", wrapRecord(err)
			}
		}
	}
	r := &mpReader{b: payload}
	n, _, err := r.mapHeader()
	if err != nil {
		return "", wrapRecord(err)
	}
	for i := 0; i < n; i++ {
		k, err := r.str()
		if err != nil {
			return "", wrapRecord(err)
		}
		if k == "t" {
			t, err := r.str()
			return t, wrapRecord(err)
		}
		if _, err := r.skip(); err != nil {
			return "", wrapRecord(err)
		}
	}
	return "", wrapRecord(r.errf("object missing required field `t`"))
}

func wrapRecord(err error) error {
	if de, ok := err.(*DecodeError); ok && de.Struct == "" {
		de.Struct = "DumpRecord"
	}
	return err
}

// DecodeRecord decodes one DumpRecord payload. A tag this version does not
// know gives an *UnknownRecord holding the payload. Byte fields share memory
// with payload.
func DecodeRecord(enc Encoding, payload []byte) (Record, error) {
	tag, err := PeekTag(enc, payload)
	if err != nil {
		return nil, err
	}
	switch tag {
	case TagHeader:
		v := &HeaderRecord{}
		return v, headerSchema.decode(enc, payload, v, &v.Unknown)
	case TagModelStart:
		v := &ModelStartRecord{}
		return v, modelStartSchema.decode(enc, payload, v, &v.Unknown)
	case TagMeta:
		v := &MetaRecord{}
		return v, metaRecordSchema.decode(enc, payload, v, &v.Unknown)
	case TagRevision:
		v := &RevisionRecord{}
		return v, revisionRecordSchema.decode(enc, payload, v, &v.Unknown)
	case TagBlob:
		v := &BlobRecord{}
		return v, blobRecordSchema.decode(enc, payload, v, &v.Unknown)
	case TagModelEnd:
		v := &ModelEndRecord{}
		return v, modelEndSchema.decode(enc, payload, v, &v.Unknown)
	case TagEOF:
		v := &EofRecord{}
		return v, eofSchema.decode(enc, payload, v, &v.Unknown)
	}
	return &UnknownRecord{RecordTag: tag, Raw: payload}, nil
}
