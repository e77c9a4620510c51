package events

// Binary is SpecStar's blob reference. In a stored payload only file_id,
// size and content_type remain; the DiskBlobStore file holds all four.
type Binary struct {
	FileID      Opt[string]
	Size        Opt[int64]
	ContentType Opt[string]
	Data        Opt[[]byte]
	Unknown     Unknown
}

var binarySchema = newSchema("Binary", "",
	optField(strField[string], "file_id", func(v *Binary) *Opt[string] { return &v.FileID }, false),
	optField(intField[int64], "size", func(v *Binary) *Opt[int64] { return &v.Size }, false),
	optField(strField[string], "content_type", func(v *Binary) *Opt[string] { return &v.ContentType }, false),
	optField(bytesField[[]byte], "data", func(v *Binary) *Opt[[]byte] { return &v.Data }, false),
)

// Encode writes the Binary. The DiskBlobStore uses msgspec.msgpack.Encoder()
// without deterministic order; for a Struct the bytes are the same.
func (v *Binary) Encode(enc Encoding) ([]byte, error) {
	return binarySchema.encode(enc, v, &v.Unknown)
}

// DecodeBinary reads a Binary. Data shares memory with data.
func DecodeBinary(enc Encoding, data []byte) (*Binary, error) {
	v := &Binary{}
	return v, binarySchema.decode(enc, data, v, &v.Unknown)
}
