package events

// ResourceMeta is the meta store's one row per resource, fields in upstream
// declaration order; the rev_* fields mirror the current revision and are
// UNSET on rows written before they existed.
type ResourceMeta struct {
	CurrentRevisionID  string
	ResourceID         string
	SchemaVersion      Opt[string] // str | None = None
	TotalRevisionCount int64
	CreatedTime        Time
	UpdatedTime        Time
	CreatedBy          string
	UpdatedBy          string
	IsDeleted          bool       // = False
	IndexedData        Opt[Value] // dict[str, Any] | UNSET; a Map when set
	RevStatus          Opt[string]
	RevCreatedBy       Opt[string]
	RevUpdatedBy       Opt[string]
	RevCreatedTime     Opt[Time]
	RevUpdatedTime     Opt[Time]
	Unknown            Unknown // fields from newer SpecStar versions
}

var resourceMetaSchema = newSchema("ResourceMeta", "",
	strField("current_revision_id", func(v *ResourceMeta) *string { return &v.CurrentRevisionID }),
	strField("resource_id", func(v *ResourceMeta) *string { return &v.ResourceID }),
	optField(strField[string], "schema_version", func(v *ResourceMeta) *Opt[string] { return &v.SchemaVersion }, true),
	intField("total_revision_count", func(v *ResourceMeta) *int64 { return &v.TotalRevisionCount }),
	timeField("created_time", func(v *ResourceMeta) *Time { return &v.CreatedTime }),
	timeField("updated_time", func(v *ResourceMeta) *Time { return &v.UpdatedTime }),
	strField("created_by", func(v *ResourceMeta) *string { return &v.CreatedBy }),
	strField("updated_by", func(v *ResourceMeta) *string { return &v.UpdatedBy }),
	withDefault(boolField("is_deleted", func(v *ResourceMeta) *bool { return &v.IsDeleted }), func(v *ResourceMeta) { v.IsDeleted = false }),
	optField(valueField[Value], "indexed_data", func(v *ResourceMeta) *Opt[Value] { return &v.IndexedData }, false),
	optField(strField[string], "rev_status", func(v *ResourceMeta) *Opt[string] { return &v.RevStatus }, false),
	optField(strField[string], "rev_created_by", func(v *ResourceMeta) *Opt[string] { return &v.RevCreatedBy }, false),
	optField(strField[string], "rev_updated_by", func(v *ResourceMeta) *Opt[string] { return &v.RevUpdatedBy }, false),
	optField(timeField[Time], "rev_created_time", func(v *ResourceMeta) *Opt[Time] { return &v.RevCreatedTime }, false),
	optField(timeField[Time], "rev_updated_time", func(v *ResourceMeta) *Opt[Time] { return &v.RevUpdatedTime }, false),
)

// Encode writes the ResourceMeta as SpecStar's serializer does.
func (v *ResourceMeta) Encode(enc Encoding) ([]byte, error) {
	return resourceMetaSchema.encode(enc, v, &v.Unknown)
}

// DecodeResourceMeta reads a ResourceMeta written in enc.
func DecodeResourceMeta(enc Encoding, data []byte) (*ResourceMeta, error) {
	v := &ResourceMeta{}
	return v, resourceMetaSchema.decode(enc, data, v, &v.Unknown)
}
