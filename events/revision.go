package events

// RevisionInfo is the metadata SpecStar keeps for every revision (the
// resource store's `info`), fields in upstream declaration order.
type RevisionInfo struct {
	UID                 string // uuid4, canonical 36-char form
	ResourceID          string
	RevisionID          string      // "{resource_id}:{n}"
	ParentRevisionID    Opt[string] // str | None = None
	ParentSchemaVersion Opt[string] // str | None | UNSET = UNSET
	SchemaVersion       Opt[string] // str | None = None
	DataHash            Opt[string] // "xxh3_128:<32 hex>" | UNSET
	Status              string      // "draft" | "stable"
	CreatedTime         Time
	UpdatedTime         Time
	CreatedBy           string
	UpdatedBy           string
	Unknown             Unknown // fields from newer SpecStar versions
}

var revisionInfoSchema = newSchema("RevisionInfo", "",
	uuidField("uid", func(v *RevisionInfo) *string { return &v.UID }),
	strField("resource_id", func(v *RevisionInfo) *string { return &v.ResourceID }),
	strField("revision_id", func(v *RevisionInfo) *string { return &v.RevisionID }),
	optField(strField[string], "parent_revision_id", func(v *RevisionInfo) *Opt[string] { return &v.ParentRevisionID }, true),
	optField(strField[string], "parent_schema_version", func(v *RevisionInfo) *Opt[string] { return &v.ParentSchemaVersion }, false),
	optField(strField[string], "schema_version", func(v *RevisionInfo) *Opt[string] { return &v.SchemaVersion }, true),
	optField(strField[string], "data_hash", func(v *RevisionInfo) *Opt[string] { return &v.DataHash }, false),
	strField("status", func(v *RevisionInfo) *string { return &v.Status }),
	timeField("created_time", func(v *RevisionInfo) *Time { return &v.CreatedTime }),
	timeField("updated_time", func(v *RevisionInfo) *Time { return &v.UpdatedTime }),
	strField("created_by", func(v *RevisionInfo) *string { return &v.CreatedBy }),
	strField("updated_by", func(v *RevisionInfo) *string { return &v.UpdatedBy }),
)

// Encode writes the RevisionInfo as SpecStar's serializer does.
func (v *RevisionInfo) Encode(enc Encoding) ([]byte, error) {
	return revisionInfoSchema.encode(enc, v, &v.Unknown)
}

// DecodeRevisionInfo reads a RevisionInfo written in enc.
func DecodeRevisionInfo(enc Encoding, data []byte) (*RevisionInfo, error) {
	v := &RevisionInfo{}
	return v, revisionInfoSchema.decode(enc, data, v, &v.Unknown)
}

// RawResource is one revision as an archive carries it: its info and the
// stored payload bytes, unchanged (JSON text or msgpack, per the model).
type RawResource struct {
	Info    RevisionInfo
	RawData []byte
	Unknown Unknown
}

var rawResourceSchema = newSchema("RawResource", "",
	field[RawResource]{
		name: "info", required: true, present: always[RawResource],
		encMP: func(w *mpWriter, v *RawResource) error {
			return revisionInfoSchema.encodeMP(w, &v.Info, &v.Info.Unknown)
		},
		appendJS: func(b []byte, v *RawResource) ([]byte, error) {
			return revisionInfoSchema.appendJSON(b, &v.Info, &v.Info.Unknown)
		},
		decMP: func(r *mpReader, v *RawResource) error {
			return revisionInfoSchema.decodeMP(r, &v.Info, &v.Info.Unknown)
		},
		decJS: func(r *jsReader, v *RawResource) error {
			return revisionInfoSchema.decodeJSON(r, &v.Info, &v.Info.Unknown)
		},
	},
	bytesField("raw_data", func(v *RawResource) *[]byte { return &v.RawData }),
)

// Encode writes the RawResource; archives always use Msgpack.
func (v *RawResource) Encode(enc Encoding) ([]byte, error) {
	return rawResourceSchema.encode(enc, v, &v.Unknown)
}

// DecodeRawResource reads a RawResource. RawData shares memory with data.
func DecodeRawResource(enc Encoding, data []byte) (*RawResource, error) {
	v := &RawResource{}
	return v, rawResourceSchema.decode(enc, data, v, &v.Unknown)
}

// Migrated reports whether the revision was moved to another schema by
// SpecStar's migrate(), which keeps the old data_hash: a hash that does
// not match such a revision's payload is expected, any other is not.
func (v *RevisionInfo) Migrated() bool {
	return v.ParentSchemaVersion.IsSet() &&
		(!v.SchemaVersion.IsSet() || v.SchemaVersion.Value != v.ParentSchemaVersion.Value)
}
