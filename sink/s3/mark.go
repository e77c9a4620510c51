package s3

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// markDir is the key part, below the part of Prefix before "{model}", that
// holds one object per durable consumer that has written the sink
// (replicate.Marker): an emptied prefix or bucket has lost it, and the
// consumer's position is then not trusted. A model never has its name
// (models need resources/store/ objects, and a leading dot is no model).
const markDir = ".specstar-replicator/"

func (s *Sink) markKey(consumer string) string {
	before, _, _ := strings.Cut(s.opts.Prefix, modelPlaceholder)
	return before + markDir + url.PathEscape(consumer) + ".consumer"
}

// Marked reports whether consumer has marked this sink.
func (s *Sink) Marked(ctx context.Context, consumer string) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	h, err := s.head(ctx, s.opts.Bucket, s.markKey(consumer))
	if err != nil {
		return false, fmt.Errorf("sink: s3: mark of consumer %s: %w", consumer, err)
	}
	return h != nil, nil
}

// Mark records that consumer writes this sink: an S3 PUT is durable once
// it returns.
func (s *Sink) Mark(ctx context.Context, consumer string) error {
	if err := s.writable(ctx); err != nil {
		return err
	}
	body := fmt.Appendf(nil, "consumer %s has written this sink since %s\n", consumer, time.Now().UTC().Format(time.RFC3339))
	if _, err := s.put(ctx, s.opts.Bucket, s.markKey(consumer), body, "text/plain", true); err != nil {
		return fmt.Errorf("sink: s3: mark of consumer %s: %w", consumer, err)
	}
	return nil
}
