package s3_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/s3"
	"github.com/specstar/replicator/sink/sinktest"
)

// TestConformance runs the sink conformance suite against the S3 sink on
// one versitygw, each Open on a fresh bucket. S3 keeps revisions and
// blobs, never metas. (An external test package: the root sink package,
// which the suite uses, imports this one.)
func TestConformance(t *testing.T) {
	sinktest.Run(t, S3Backend(s3test.Start(t)))
}

// S3Backend is the S3 sink on srv, one new bucket per Open, for this
// package's conformance run and the layered one.
func S3Backend(srv *s3test.Server) sinktest.Backend {
	var n atomic.Int64
	return sinktest.Backend{
		Open: func(t *testing.T) sink.Sink {
			bucket := fmt.Sprintf("conformance-%d", n.Add(1))
			srv.CreateBucket(t, bucket)
			return openS3(t, srv, bucket)
		},
		Reopen: func(t *testing.T, s sink.Sink) sink.Sink {
			return openS3(t, srv, s3.BucketOf(s.(*s3.Sink)))
		},
		Revisions: true, Blobs: true,
		PathRevisionIDs: true,
		Outside: func(t *testing.T, s sink.Sink) string {
			return keysBeside(t, srv, s3.BucketOf(s.(*s3.Sink)))
		},
		Dump: func(t *testing.T, s sink.Sink) string {
			return dumpBucket(t, srv, s3.BucketOf(s.(*s3.Sink)))
		},
	}
}

// dumpBucket lists every object of bucket in key order: its key, content
// type and bytes.
func dumpBucket(t *testing.T, srv *s3test.Server, bucket string) string {
	t.Helper()
	ctx := context.Background()
	c := srv.Client(t)
	var b strings.Builder
	p := awss3.NewListObjectsV2Paginator(c, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("list bucket %s: %v", bucket, err)
		}
		for _, o := range page.Contents {
			if strings.Contains(aws.ToString(o.Key), ".specstar-replicator/") {
				continue // the replicator's own marks and leases, not SpecStar's data
			}
			obj, err := c.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatalf("get s3://%s/%s: %v", bucket, aws.ToString(o.Key), err)
			}
			data, err := io.ReadAll(obj.Body)
			obj.Body.Close()
			if err != nil {
				t.Fatalf("read s3://%s/%s: %v", bucket, aws.ToString(o.Key), err)
			}
			fmt.Fprintf(&b, "%s %q %x\n", aws.ToString(o.Key), aws.ToString(obj.ContentType), data)
		}
	}
	return b.String()
}

func openS3(t *testing.T, srv *s3test.Server, bucket string) *s3.Sink {
	t.Helper()
	s, err := s3.OpenOn(context.Background(), srv, bucket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// keysBeside lists every bucket of srv but own, and their keys.
func keysBeside(t *testing.T, srv *s3test.Server, own string) string {
	t.Helper()
	ctx := context.Background()
	c := srv.Client(t)
	out, err := c.ListBuckets(ctx, &awss3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, bk := range out.Buckets {
		name := aws.ToString(bk.Name)
		if name == own {
			continue
		}
		b.WriteString(name + ":")
		p := awss3.NewListObjectsV2Paginator(c, &awss3.ListObjectsV2Input{Bucket: bk.Name})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Contents {
				if strings.Contains(aws.ToString(o.Key), ".specstar-replicator/") {
					continue // the replicator's own marks and leases
				}
				b.WriteString(" " + aws.ToString(o.Key))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
