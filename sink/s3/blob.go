package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/sink/internal/store"
)

// ApplyBlob materializes one blob at {blob_prefix}{file_id}: the raw bytes,
// Content-Type set to contentType (left to S3's default when ""). The
// bytes are hashed while read and an object appears only if exactly size
// bytes hash to fileID; otherwise the error is an *InvalidError and
// nothing is left at the key. A blob of at most PartSize bytes is read
// into one buffer, checked, then PUT; a larger one goes up in PartSize
// parts of a multipart upload that is aborted, never completed, when the
// check fails. Memory is one PartSize buffer, whatever the blob's size; a
// blob needing more than S3's 10000 parts is refused (InvalidError) rather
// than given bigger buffers.
//
// An object already at the key (found by a HEAD before anything is read,
// or by If-None-Match at the end) is Unchanged: blobs are content
// addressed and written once.
func (s *Sink) ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (store.Outcome, error) {
	if err := s.writable(ctx); err != nil {
		return 0, err
	}
	what := fmt.Sprintf("blob %q", fileID)
	if !dedup.ValidFileID(fileID) {
		return 0, store.Invalid(what, "file_id is not 32 lowercase hex digits (the xxh3-128 of the bytes)")
	}
	if size < 0 {
		return 0, store.Invalidf(what, "negative size %d", size)
	}
	if data == nil {
		return 0, store.Invalid(what, "no data")
	}
	bucket, key := s.opts.BlobBucket, s.blobKey(fileID)
	if err := checkKeyLen(what, key); err != nil {
		return 0, err
	}
	unlock := s.locks.Lock("\x00blob\x00" + fileID)
	defer unlock()
	h, err := s.head(ctx, bucket, key)
	if err != nil {
		return 0, err
	}
	// An object of another length cannot hold these bytes: someone else's
	// broken write; it is replaced.
	replace := false
	if h != nil {
		if h.ContentLength == nil || *h.ContentLength == size {
			return store.Unchanged, nil
		}
		replace = true
	}
	if size > maxS3Parts*s.opts.PartSize {
		// Memory stays one part; a bigger part size is the operator's call.
		return 0, store.Invalidf(what, "%d bytes need more than S3's %d parts of part_size %d; raise part_size and replay", size, maxS3Parts, s.opts.PartSize)
	}
	src := io.LimitReader(store.CtxReader{Ctx: ctx, R: data}, size+1)
	if size <= s.opts.PartSize {
		return s.putSmallBlob(ctx, bucket, key, fileID, size, contentType, src, replace)
	}
	return s.putMultipartBlob(ctx, bucket, key, fileID, size, contentType, src, replace)
}

// maxS3Parts is the most parts a multipart upload may have.
const maxS3Parts = 10000

// readErr maps a failed read of a blob's source to the context's error
// when that is the cause.
func readErr(ctx context.Context, fileID string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("sink: s3 blob %s: read: %w", fileID, err)
}

// checkBlobSum checks the count and hash of what was read.
func checkBlobSum(fileID string, size, n int64, h hash.Hash) error {
	what := fmt.Sprintf("blob %q", fileID)
	switch {
	case n > size:
		return store.Invalidf(what, "more than the declared %d bytes", size)
	case n < size:
		return store.Invalidf(what, "%d bytes but the declared size is %d", n, size)
	}
	if got := dedup.HexSum(h); got != fileID {
		return store.Invalidf(what, "bytes hash to %s", got)
	}
	return nil
}

func (s *Sink) putSmallBlob(ctx context.Context, bucket, key, fileID string, size int64, contentType string, src io.Reader, replace bool) (store.Outcome, error) {
	buf := make([]byte, size+1)
	n, err := io.ReadFull(src, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, readErr(ctx, fileID, err)
	}
	h := dedup.NewFileIDHasher()
	h.Write(buf[:n])
	if err := checkBlobSum(fileID, size, int64(n), h); err != nil {
		return 0, err
	}
	created, err := s.putWithMeta(ctx, bucket, key, buf[:n], contentType, blobMetadata(contentType), !replace)
	if err != nil {
		return 0, err
	}
	if !created {
		return store.Unchanged, nil
	}
	return store.Written, nil
}

func (s *Sink) putMultipartBlob(ctx context.Context, bucket, key, fileID string, size int64, contentType string, src io.Reader, replace bool) (out store.Outcome, err error) {
	where := objURL(bucket, key)
	// CRC32 part checksums, declared up front and listed at completion, as
	// the SDK's transfer manager does: S3 then checks every part.
	in := &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, Metadata: blobMetadata(contentType)}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	created, err := s.client.CreateMultipartUpload(ctx, in)
	if err != nil {
		return 0, fmt.Errorf("sink: s3 create multipart upload %s: %w", where, err)
	}
	uploadID := created.UploadId
	completed := false
	defer func() {
		if completed {
			return
		}
		// Abort even when ctx is done, so no parts are left to bill.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, aerr := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: uploadID,
		}); aerr != nil && err == nil {
			err = fmt.Errorf("sink: s3 abort multipart upload %s: %w", where, aerr)
		}
	}()

	h := dedup.NewFileIDHasher()
	buf := make([]byte, s.opts.PartSize)
	var (
		parts []types.CompletedPart
		total int64
	)
	for num := int32(1); ; num++ {
		n, rerr := io.ReadFull(src, buf)
		if rerr != nil && !errors.Is(rerr, io.ErrUnexpectedEOF) && !errors.Is(rerr, io.EOF) {
			return 0, readErr(ctx, fileID, rerr)
		}
		if n > 0 {
			h.Write(buf[:n])
			total += int64(n)
			if total > size {
				return 0, checkBlobSum(fileID, size, total, h)
			}
			part, err := s.uploadPart(ctx, bucket, key, uploadID, num, buf[:n])
			if err != nil {
				return 0, err
			}
			parts = append(parts, part)
		}
		if rerr != nil {
			break // the source ended
		}
	}
	if err := checkBlobSum(fileID, size, total, h); err != nil {
		return 0, err
	}
	complete := &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if !replace && !s.useHead() {
		complete.IfNoneMatch = aws.String("*")
	}
	for {
		release, err := s.acquire(ctx)
		if err != nil {
			return 0, err
		}
		_, err = s.client.CompleteMultipartUpload(ctx, complete)
		release()
		switch {
		case err == nil:
			completed = true
			return store.Written, nil
		case complete.IfNoneMatch != nil && isPreconditionFailed(err):
			return store.Unchanged, nil // someone else wrote it meanwhile; abort ours
		case complete.IfNoneMatch != nil && s.fallBackToHead(err):
			// The HEAD before the upload is the check.
			complete.IfNoneMatch = nil
			continue
		}
		return 0, fmt.Errorf("sink: s3 complete multipart upload %s: %w", where, err)
	}
}

// uploadPart sends one part; the body is a byte slice, so retries resend it.
func (s *Sink) uploadPart(ctx context.Context, bucket, key string, uploadID *string, num int32, body []byte) (types.CompletedPart, error) {
	release, err := s.acquire(ctx)
	if err != nil {
		return types.CompletedPart{}, err
	}
	defer release()
	out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: uploadID,
		PartNumber: aws.Int32(num), Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
	})
	if err != nil {
		return types.CompletedPart{}, fmt.Errorf("sink: s3 upload part %d of %s: %w", num, objURL(bucket, key), err)
	}
	return types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32}, nil
}
