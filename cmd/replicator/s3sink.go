package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/sink"
)

// s3Spec is an s3:// sink URL without our own options; blobStore says the
// URL names a deployment's blob store, whose path is the blob prefix.
type s3Spec struct {
	url       string
	blobStore bool
}

// options parses the URL for the sink package.
func (s s3Spec) options() (sink.S3Options, error) {
	if s.blobStore {
		return sink.ParseS3BlobURL(s.url)
	}
	return sink.ParseS3URL(s.url)
}

// parseS3Sink reads s3://bucket/prefix?endpoint=...&name=N&models=a,b; name
// and models are ours, every other option is sink.ParseS3URL's.
func parseS3Sink(raw string) (*sinkSpec, error) {
	s := &sinkSpec{raw: raw, kind: "s3"}
	base, query, _ := strings.Cut(raw, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", raw, err)
	}
	s.name = q.Get("name")
	s.models = splitList(q.Get("models"))
	q.Del("name")
	q.Del("models")
	if len(q) > 0 {
		base += "?" + q.Encode()
	}
	s.s3.url = base
	o, err := s.s3.options()
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", raw, err)
	}
	if s.name == "" {
		// Stable for the same server, bucket and prefixes.
		id := o.Endpoint + "|" + o.Bucket + "|" + o.Prefix + "|" + o.BlobBucket + "|" + o.BlobPrefix
		h := xxh3.HashString128("s3:" + id).Bytes()
		s.name = fmt.Sprintf("sink-s3-%x", h[:6])
	}
	return s, nil
}

func (s *sinkSpec) openS3(ctx context.Context) (applier, error) {
	o, err := s.s3.options()
	if err != nil {
		return nil, fmt.Errorf("open sink %s: %w", s.raw, err)
	}
	st, err := sink.OpenS3(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("open sink %s: %w", s.raw, err)
	}
	return st, nil
}
