package s3

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/sink/internal/store"
)

// Spec is a parsed s3:// sink URL: the store URL to open, and the durable
// consumer name and model filter of the replicator reading into it.
type Spec struct {
	URL string // the s3:// URL without name= and models=, as ParseURL reads it
	// BlobStore says the URL names a deployment's blob store, whose path
	// is the blob prefix (ParseBlobURL reads it).
	BlobStore bool
	Name      string   // durable consumer name (name=, else derived from server, buckets and prefixes)
	Models    []string // models= filter; empty means every model
}

// ParseSpec reads s3://bucket/prefix?endpoint=...&name=N&models=a,b; name
// and models are the replicator's, every other option is ParseURL's.
func ParseSpec(raw string) (*Spec, error) {
	s := &Spec{}
	base, query, _ := strings.Cut(raw, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, err
	}
	s.Name = q.Get("name")
	s.Models = store.SplitList(q.Get("models"))
	q.Del("name")
	q.Del("models")
	if len(q) > 0 {
		base += "?" + q.Encode()
	}
	s.URL = base
	o, err := s.Options()
	if err != nil {
		return nil, err
	}
	if s.Name == "" {
		// Stable for the same server, bucket and prefixes.
		id := o.Endpoint + "|" + o.Bucket + "|" + o.Prefix + "|" + o.BlobBucket + "|" + o.BlobPrefix
		if o.Factory && !s.BlobStore {
			id += "|factory=s3"
		}
		h := xxh3.HashString128("s3:" + id).Bytes()
		s.Name = fmt.Sprintf("sink-s3-%x", h[:6])
	}
	return s, nil
}

// Options parses the store URL, as a blob store when BlobStore is set.
func (s *Spec) Options() (Options, error) {
	if s.BlobStore {
		return ParseBlobURL(s.URL)
	}
	return ParseURL(s.URL)
}

// Consumer is the durable consumer name and model filter, as every
// backend's Spec gives them to the root sink package.
func (s *Spec) Consumer() (name string, models []string) { return s.Name, s.Models }

// Holds says which records verify expects the sink to keep: revisions
// and blobs.
func (s *Spec) Holds() (revisions, blobs bool) { return true, true }

// Open opens the resource and blob stores the Spec names (for a factory
// URL, its revisions and blobs only, in the factory's layout:
// OpenFactory opens the whole factory).
func (s *Spec) Open(ctx context.Context) (*Sink, error) {
	o, err := s.Options()
	if err != nil {
		return nil, err
	}
	return Open(ctx, o)
}

// IsFactory says the URL names SpecStar's all-S3 factory (factory=s3)
// rather than a resource or blob store, so the caller opens it with
// OpenFactory.
func (s *Spec) IsFactory() bool {
	o, err := s.Options()
	return err == nil && o.Factory
}

// OpenFactory opens the all-S3 factory the Spec names.
func (s *Spec) OpenFactory(ctx context.Context) (*Factory, error) {
	o, err := s.Options()
	if err != nil {
		return nil, err
	}
	return OpenFactory(ctx, o)
}
