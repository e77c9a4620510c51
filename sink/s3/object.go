package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Bounds on objects read whole into memory.
const (
	maxS3IndexObject = 4 << 10   // a uid index object: 36 bytes and maybe a newline
	maxS3InfoObject  = 16 << 20  // a RevisionInfo
	maxS3DataObject  = 256 << 20 // a revision payload (SpecStar's are KiBs)
)

// getSmall reads a whole object of at most limit bytes. A missing object
// gives ok false and no error.
func (s *Sink) getSmall(ctx context.Context, bucket, key string, limit int64) (b []byte, ok bool, err error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if isNoSuchKey(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("sink: s3 get %s: %w", objURL(bucket, key), err)
	}
	defer out.Body.Close()
	b, err = io.ReadAll(io.LimitReader(out.Body, limit+1))
	if err != nil {
		return nil, false, fmt.Errorf("sink: s3 get %s: %w", objURL(bucket, key), err)
	}
	if int64(len(b)) > limit {
		return nil, false, fmt.Errorf("sink: s3 get %s: object larger than %d bytes", objURL(bucket, key), limit)
	}
	return b, true, nil
}

// head reads an object's metadata; a missing object gives nil without
// error.
func (s *Sink) head(ctx context.Context, bucket, key string) (*s3.HeadObjectOutput, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if isNoSuchKey(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("sink: s3 head %s: %w", objURL(bucket, key), err)
	}
	return out, nil
}

// put writes body to key. With ifAbsent it only creates the object: it
// reports created false (and writes nothing) when the object exists, found
// by If-None-Match: * or by a HEAD first, per Conditional. The body is a
// byte slice, so the SDK can resend it on retries.
func (s *Sink) put(ctx context.Context, bucket, key string, body []byte, contentType string, ifAbsent bool) (created bool, err error) {
	return s.putWithMeta(ctx, bucket, key, body, contentType, nil, ifAbsent)
}

// noContentType is the user metadata key (x-amz-meta-specstar-no-content-type)
// that marks a blob stored without a content type: S3 gives such an
// object a default type (binary/octet-stream), and without the mark a
// reader could not tell it from a blob that was given that type, so a
// round trip through S3 would change BlobRecord.content_type "" (what
// SpecStar writes when the type is unknown). SpecStar ignores user
// metadata.
const noContentType = "specstar-no-content-type"

// blobMetadata is the user metadata of a blob object.
func blobMetadata(contentType string) map[string]string {
	if contentType != "" {
		return nil
	}
	return map[string]string{noContentType: "1"}
}

// storedContentType is a blob object's content type as SpecStar gave it.
func storedContentType(contentType *string, meta map[string]string) string {
	for k := range meta {
		if strings.EqualFold(k, noContentType) {
			return ""
		}
	}
	return aws.ToString(contentType)
}

// putWithMeta is put with user metadata.
func (s *Sink) putWithMeta(ctx context.Context, bucket, key string, body []byte, contentType string, meta map[string]string, ifAbsent bool) (created bool, err error) {
	if ifAbsent && s.useHead() {
		h, err := s.head(ctx, bucket, key)
		if err != nil {
			return false, err
		}
		if h != nil {
			return false, nil
		}
		ifAbsent = false
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	in.Metadata = meta
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	release, err := s.acquire(ctx)
	if err != nil {
		return false, err
	}
	_, err = s.client.PutObject(ctx, in)
	release()
	switch {
	case err == nil:
		return true, nil
	case ifAbsent && isPreconditionFailed(err):
		return false, nil
	case ifAbsent && s.fallBackToHead(err):
		return s.putWithMeta(ctx, bucket, key, body, contentType, meta, true)
	}
	return false, fmt.Errorf("sink: s3 put %s: %w", objURL(bucket, key), err)
}

// fallBackToHead switches Conditional "auto" to HEAD-then-PUT when err
// says the server does not implement If-None-Match, and reports whether
// it did.
func (s *Sink) fallBackToHead(err error) bool {
	if s.opts.Conditional != condAuto || !isConditionalUnsupported(err) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.headMode = true
	return true
}

// errChangedConcurrently says an object changed between two requests of
// one Apply call: a transient condition, retried with the batch.
var errChangedConcurrently = errors.New("changed concurrently; retry")
