package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Probe checks, for `replicator doctor`, that this sink's credentials may
// do what a run does in each of its buckets: list the prefix, and put and
// delete an object (one below .specstar-replicator/doctor/, removed at
// once). It takes no lease and writes nothing SpecStar reads.
func (s *Sink) Probe(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	before, _, _ := strings.Cut(s.opts.Prefix, modelPlaceholder)
	var id [8]byte
	_, _ = rand.Read(id[:])
	probes := []struct{ bucket, prefix string }{{s.opts.Bucket, before}}
	if s.opts.BlobBucket != s.opts.Bucket {
		probes = append(probes, struct{ bucket, prefix string }{s.opts.BlobBucket, s.opts.BlobPrefix})
	}
	for _, p := range probes {
		if _, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(p.bucket), Prefix: aws.String(p.prefix), MaxKeys: aws.Int32(1)}); err != nil {
			return fmt.Errorf("sink: s3 list s3://%s/%s: %w", p.bucket, p.prefix, err)
		}
		key := p.prefix + markDir + "doctor/" + hex.EncodeToString(id[:])
		if _, err := s.put(ctx, p.bucket, key, []byte("replicator doctor probe\n"), "text/plain", false); err != nil {
			return err // names the object
		}
		if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(key)}); err != nil {
			return fmt.Errorf("sink: s3 delete s3://%s/%s: %w", p.bucket, key, err)
		}
	}
	return nil
}
