package s3

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/specstar/replicator/internal/testsupport/s3test"
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

// OpenFactoryOn opens the all-S3 factory below prefix in bucket of srv,
// with its static credentials and short retry delays, its local copies
// below cacheDir.
func OpenFactoryOn(ctx context.Context, srv *s3test.Server, bucket, prefix, cacheDir string) (*Factory, error) {
	return OpenFactoryMode(ctx, srv, bucket, prefix, cacheDir, "")
}

// OpenFactoryMode is OpenFactoryOn with a Conditional mode ("" = auto).
func OpenFactoryMode(ctx context.Context, srv *s3test.Server, bucket, prefix, cacheDir, conditional string) (*Factory, error) {
	return openFactory(ctx, Options{
		Bucket: bucket, Prefix: prefix, Endpoint: srv.Endpoint, PathStyle: true, Region: srv.Region,
		Factory: true, CacheDir: cacheDir, Conditional: conditional, maxBackoff: 20e6,
	}, config.WithCredentialsProvider(srv.Credentials()))
}

// SetBeforePut sets a function run between an upload's HEAD and its PUT,
// so a test can upload as another writer exactly there.
func (f *Factory) SetBeforePut(fn func()) { f.beforePut = fn }
