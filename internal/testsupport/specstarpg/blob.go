package specstarpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
)

// Blob is a blob the writer stored; it exists so a test can put the
// reference into a payload (Value) and compare what readers return.
type Blob struct {
	FileID      string // xxh3-128 hex of the bytes
	Size        int64
	ContentType string // "" means none given (content_type left UNSET in the payload)
	Key         string // the S3 key written (or found already there)
	Existed     bool   // the object was there already (content addressing: nothing was written)
}

// Value is the Binary as SpecStar leaves it in a stored payload once the
// bytes moved to the blob store: {file_id, size, content_type}, data
// stripped (Binary declares four fields).
func (b Blob) Value() events.Value {
	fields := []events.StructField{{Name: "file_id", Value: b.FileID}, {Name: "size", Value: b.Size}}
	if b.ContentType != "" {
		fields = append(fields, events.StructField{Name: "content_type", Value: b.ContentType})
	}
	return events.Struct{Declared: 4, Fields: fields}
}

// PutBlobBytes stores data in the blob store, as SpecStar's S3BlobStore
// does: content-addressed by file_id, the raw bytes with the S3
// ContentType, not written again when the object exists.
func (w *Writer) PutBlobBytes(ctx context.Context, data []byte, contentType string) (Blob, error) {
	if w.s3 == nil {
		return Blob{}, errors.New("specstarpg: PutBlob needs an S3 target (Options.S3)")
	}
	b := Blob{FileID: dedup.FileID(data), Size: int64(len(data)), ContentType: contentType}
	return w.putBlob(ctx, b, bytes.NewReader(data))
}

// PutBlob is PutBlobBytes for a stream of any size: the bytes are hashed
// while they are spooled to a temporary file (the file_id names the
// object, so it must be known before the upload), which is then uploaded;
// memory does not grow with the blob.
func (w *Writer) PutBlob(ctx context.Context, r io.Reader, contentType string) (Blob, error) {
	if w.s3 == nil {
		return Blob{}, errors.New("specstarpg: PutBlob needs an S3 target (Options.S3)")
	}
	f, err := os.CreateTemp("", "specstarpg-blob-*")
	if err != nil {
		return Blob{}, fmt.Errorf("specstarpg: spool blob: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := dedup.NewFileIDHasher()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		return Blob{}, fmt.Errorf("specstarpg: spool blob to %s: %w", f.Name(), err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Blob{}, fmt.Errorf("specstarpg: spool blob %s: %w", f.Name(), err)
	}
	b := Blob{FileID: dedup.HexSum(h), Size: n, ContentType: contentType}
	return w.putBlob(ctx, b, f)
}

// putBlob uploads body (b.Size bytes, seekable so the SDK can sign it)
// unless the object exists.
func (w *Writer) putBlob(ctx context.Context, b Blob, body io.ReadSeeker) (Blob, error) {
	t := w.s3
	b.Key = t.BlobKey(b.FileID)
	where := fmt.Sprintf("specstarpg: blob s3://%s/%s", t.BlobBucket, b.Key)
	_, err := t.Client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(t.BlobBucket), Key: aws.String(b.Key)})
	if err == nil {
		b.Existed = true
		return b, nil
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || (apiErr.ErrorCode() != "NotFound" && apiErr.ErrorCode() != "NoSuchKey") {
		return b, fmt.Errorf("%s: head: %w", where, err)
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(t.BlobBucket),
		Key:           aws.String(b.Key),
		Body:          body,
		ContentLength: aws.Int64(b.Size),
	}
	if b.ContentType != "" {
		in.ContentType = aws.String(b.ContentType)
	}
	if _, err := t.Client.PutObject(ctx, in); err != nil {
		return b, fmt.Errorf("%s: put: %w", where, err)
	}
	return b, nil
}
