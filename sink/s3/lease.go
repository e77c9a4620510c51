package s3

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Exclusive holds the sink for the caller alone (a restore), as an
// advisory lock holds Postgres tables (see sink.Exclusive): it fails with
// a *lease.HeldError while another process writes the same prefix, and
// from then on every other writer's writes are refused until Close. The
// leases are objects below .specstar-replicator/leases/ (see
// sink/internal/lease).
func (s *Sink) Exclusive(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.lease.Exclusive(ctx)
}

// writable is check for a write: it takes (or renews) this process's
// writer lease, refused while a restore holds the sink.
func (s *Sink) writable(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.lease.Writing(ctx)
}

// leaseStore keeps the leases of a Sink in its resource bucket, one small
// object per lease, with S3's conditional writes (If-None-Match to
// create, If-Match on the ETag to replace).
type leaseStore struct{ s *Sink }

func (l leaseStore) key(name string) string {
	before, _, _ := strings.Cut(l.s.opts.Prefix, modelPlaceholder)
	return before + markDir + "leases/" + name
}

func (l leaseStore) Create(ctx context.Context, name string, body []byte, _ time.Duration) (bool, error) {
	return l.s.put(ctx, l.s.opts.Bucket, l.key(name), body, "application/json", true)
}

func (l leaseStore) Replace(ctx context.Context, name string, body []byte, version string, _ time.Duration) (bool, error) {
	bucket, key := l.s.opts.Bucket, l.key(name)
	in := &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		ContentType: aws.String("application/json"),
	}
	if l.s.useHead() {
		// No conditional writes: compared first, a window the size of one
		// request left open.
		h, err := l.s.head(ctx, bucket, key)
		if err != nil {
			return false, err
		}
		if headETag(h) != version {
			return false, nil
		}
	} else {
		in.IfMatch = aws.String(version)
	}
	_, err := l.s.client.PutObject(ctx, in)
	switch {
	case err == nil:
		return true, nil
	case isPreconditionFailed(err) || isNoSuchKey(err):
		return false, nil
	}
	return false, fmt.Errorf("sink: s3 put %s: %w", objURL(bucket, key), err)
}

func (l leaseStore) Put(ctx context.Context, name string, body []byte, _ time.Duration) error {
	_, err := l.s.put(ctx, l.s.opts.Bucket, l.key(name), body, "application/json", false)
	return err
}

func (l leaseStore) Get(ctx context.Context, name string) ([]byte, string, bool, error) {
	bucket, key := l.s.opts.Bucket, l.key(name)
	out, err := l.s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if isNoSuchKey(err) {
			return nil, "", false, nil
		}
		return nil, "", false, fmt.Errorf("sink: s3 get %s: %w", objURL(bucket, key), err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, maxS3IndexObject))
	if err != nil {
		return nil, "", false, fmt.Errorf("sink: s3 get %s: %w", objURL(bucket, key), err)
	}
	return b, aws.ToString(out.ETag), true, nil
}

func (l leaseStore) List(ctx context.Context, prefix string) ([]string, error) {
	base := l.key("")
	var names []string
	err := l.s.listObjects(ctx, l.s.opts.Bucket, base+prefix, func(o types.Object) error {
		names = append(names, strings.TrimPrefix(aws.ToString(o.Key), base))
		return nil
	})
	return names, err
}

func (l leaseStore) Delete(ctx context.Context, name string) error {
	bucket, key := l.s.opts.Bucket, l.key(name)
	if _, err := l.s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil && !isNoSuchKey(err) {
		return fmt.Errorf("sink: s3 delete %s: %w", objURL(bucket, key), err)
	}
	return nil
}
