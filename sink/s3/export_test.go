package s3

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/specstar/replicator/internal/s3test"
)

// Test hooks for the external test package (conformance_test.go), which
// cannot live in this package: the root sink package it uses imports
// this one.

// OpenOn opens a sink on bucket of srv with its static credentials and
// short retry delays, as this package's own tests do.
func OpenOn(ctx context.Context, srv *s3test.Server, bucket string) (*Sink, error) {
	return openS3(ctx, Options{
		Bucket: bucket, Endpoint: srv.Endpoint, PathStyle: true, Region: srv.Region,
		maxBackoff: 20e6, // 20 ms
	}, config.WithCredentialsProvider(srv.Credentials()))
}

// BucketOf is the resource bucket s writes, so a test can reopen it.
func BucketOf(s *Sink) string { return s.opts.Bucket }
