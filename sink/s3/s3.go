package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/lease"
	"github.com/specstar/replicator/sink/internal/store"
)

// Sink writes and reads SpecStar's S3ResourceStore and S3BlobStore, the
// layout of SpecStar's Postgres+S3 storage factory:
//
//	{prefix}resources/store/{uid}/data                                  payload bytes, unchanged
//	{prefix}resources/store/{uid}/info                                  RevisionInfo (msgpack by default)
//	{prefix}resources/resource/{resource_id}/{revision_id}/{p_sv}/uid   text: the uid
//	{blob_prefix}{file_id}                                              raw blob bytes, Content-Type set
//
// with prefix "{model}/data/" and blob prefix "blobs/" by default. S3 holds
// no metas: pair it with a meta store (the Postgres sink) for a whole
// deployment.
//
// Every Apply call is synchronous: when it returns, its objects are in S3
// (or it failed). The replicator applies up to 16 events in parallel
// anyway; Concurrency bounds the write requests in flight across all of
// them. Flush has nothing left to wait for. Writes to one resource are
// serialized in this process; a second writer of the same resources at
// the same time is not coordinated with (index objects are last-writer
// wins).
type Sink struct {
	opts   Options
	client *s3.Client
	locks  store.KeyLocks
	sem    chan struct{} // bounds write requests in flight

	lease *lease.Keeper // this process's lease, while it writes or restores

	mu       sync.Mutex
	closed   bool
	headMode bool // Conditional "auto" found If-None-Match unsupported
}

// Options say where a SpecStar S3ResourceStore / S3BlobStore lives and how to write it.
type Options struct {
	Bucket      string                      // resource store bucket
	Prefix      string                      // resource store key prefix; "{model}" replaced by the model name; "" means "{model}/data/"
	BlobBucket  string                      // "" means Bucket
	BlobPrefix  string                      // blob key prefix; "" means "blobs/"
	Endpoint    string                      // custom endpoint URL for S3-compatible servers; "" = AWS
	Region      string                      // "" = AWS chain, else us-east-1
	PathStyle   bool                        // path-style addressing (http://host/bucket/key), for S3-compatible servers
	Encoding    events.Opt[events.Encoding] // info encoding; UNSET = msgpack
	Concurrency int                         // max concurrent write requests in flight for this sink; 0 = 16
	PartSize    int64                       // multipart part size; blobs above it use multipart; 0 = 8 MiB (min 5 MiB)
	Conditional string                      // "auto" (default: If-None-Match: * and fall back to HEAD-then-PUT if the server rejects the header as unsupported), "if-none-match", "head"
	MaxAttempts int                         // attempts per request for throttling/5xx/network errors, with backoff; 0 = 10

	// Factory names SpecStar's all-S3 storage factory below Prefix (its
	// base, with no "{model}"): per model a whole SQLite meta store at
	// {base}{model}/meta.db, revisions under {base}{model}/, blobs under
	// {base}blobs/, json by default. OpenFactory opens it.
	Factory     bool
	CacheDir    string // where the factory keeps its local meta.db copies; "" = the system's temp directory
	CacheModels int    // meta.db copies kept open at most (more are re-downloaded when needed); 0 = 64

	// leaseTTL is how long a lease outlives its last renewal (0:
	// lease.DefaultTTL); tests shorten it.
	leaseTTL time.Duration

	// maxBackoff caps the delay between retries (0: the SDK's 20 s); tests
	// shorten it.
	maxBackoff time.Duration
}

// Defaults and limits of S3Options.
const (
	defaultS3Prefix      = "{model}/data/"
	defaultS3BlobPrefix  = "blobs/"
	defaultS3Concurrency = 16
	defaultS3PartSize    = 8 << 20
	minS3PartSize        = 5 << 20 // S3's minimum for every part but the last
	maxS3PartSize        = 5 << 30 // S3's maximum part size
	defaultS3Attempts    = 10
	maxS3KeyLen          = 1024 // S3's maximum key length in bytes
	modelPlaceholder     = "{model}"
	defaultCacheModels   = 64

	condAuto = "auto"
	condINM  = "if-none-match"
	condHead = "head"
)

// withDefaults fills the zero values and checks the rest.
func (o Options) withDefaults() (Options, error) {
	if o.Bucket == "" {
		return o, errors.New("sink: s3: no bucket")
	}
	if o.Factory {
		base := factoryBase(o.Prefix)
		if strings.Contains(base, modelPlaceholder) {
			return o, fmt.Errorf("sink: s3: factory prefix %q: the factory places each model below it, %s cannot be used", o.Prefix, modelPlaceholder)
		}
		o.Prefix = base + modelPlaceholder + "/"
		if o.BlobPrefix == "" {
			o.BlobPrefix = base + defaultS3BlobPrefix
		}
		if !o.Encoding.Present {
			o.Encoding = events.Some(events.JSON) // the factory's default
		}
		if o.CacheModels == 0 {
			o.CacheModels = defaultCacheModels
		}
	}
	if o.Prefix == "" {
		o.Prefix = defaultS3Prefix
	}
	if o.BlobBucket == "" {
		o.BlobBucket = o.Bucket
	}
	if o.BlobPrefix == "" {
		o.BlobPrefix = defaultS3BlobPrefix
	}
	if strings.Contains(o.BlobPrefix, modelPlaceholder) {
		return o, fmt.Errorf("sink: s3: blob prefix %q: blobs are shared by all models, %s cannot be used", o.BlobPrefix, modelPlaceholder)
	}
	if o.Encoding.Present && !o.Encoding.Null {
		switch o.Encoding.Value {
		case events.JSON, events.Msgpack:
		default:
			return o, fmt.Errorf("sink: s3: unknown encoding %v", o.Encoding.Value)
		}
	}
	switch {
	case o.Concurrency == 0:
		o.Concurrency = defaultS3Concurrency
	case o.Concurrency < 0:
		return o, fmt.Errorf("sink: s3: concurrency %d must be positive", o.Concurrency)
	}
	switch {
	case o.PartSize == 0:
		o.PartSize = defaultS3PartSize
	case o.PartSize < minS3PartSize || o.PartSize > maxS3PartSize:
		return o, fmt.Errorf("sink: s3: part size %d outside S3's limits (%d to %d bytes)", o.PartSize, minS3PartSize, maxS3PartSize)
	}
	switch o.Conditional {
	case "":
		o.Conditional = condAuto
	case condAuto, condINM, condHead:
	default:
		return o, fmt.Errorf("sink: s3: unknown conditional mode %q (want %q, %q or %q)", o.Conditional, condAuto, condINM, condHead)
	}
	switch {
	case o.MaxAttempts == 0:
		o.MaxAttempts = defaultS3Attempts
	case o.MaxAttempts < 0:
		return o, fmt.Errorf("sink: s3: max attempts %d must be positive", o.MaxAttempts)
	}
	return o, nil
}

// Open connects to the bucket(s) with credentials from the default AWS
// chain (environment, shared config, web identity, ...) and checks that
// they exist, the one way to get an S3. Nothing is written until a record
// is applied.
func Open(ctx context.Context, opts Options) (*Sink, error) {
	return openS3(ctx, opts)
}

// openS3 is OpenS3 with extra config loading options (tests pass static
// credentials).
func openS3(ctx context.Context, opts Options, loadOpts ...func(*config.LoadOptions) error) (*Sink, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConnsPerHost = 2 * o.Concurrency
	})
	loadOpts = append([]func(*config.LoadOptions) error{config.WithHTTPClient(httpClient), config.WithLogger(sdkLogger{})}, loadOpts...)
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("sink: s3: load AWS configuration: %w", err)
	}
	if o.Region != "" {
		cfg.Region = o.Region
	} else if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		so.Retryer = retry.NewStandard(func(ro *retry.StandardOptions) {
			ro.MaxAttempts = o.MaxAttempts
			if o.maxBackoff > 0 {
				ro.MaxBackoff = o.maxBackoff
			}
			// The default token bucket stops retrying after a burst of
			// failures ("retry quota exceeded"), which is exactly when a
			// replicator must keep retrying; backoff alone paces it.
			ro.RateLimiter = ratelimit.None
		})
	})
	s := &Sink{
		opts:   o,
		client: client,
		sem:    make(chan struct{}, o.Concurrency),
	}
	s.lease = lease.New(leaseStore{s}, s.String(), o.leaseTTL, nil)
	buckets := []string{o.Bucket}
	if o.BlobBucket != o.Bucket {
		buckets = append(buckets, o.BlobBucket)
	}
	for _, b := range buckets {
		if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(b)}); err != nil {
			if isNotFound(err) {
				return nil, fmt.Errorf("sink: s3 bucket %q does not exist at %s: %w", b, s.endpointName(), err)
			}
			return nil, fmt.Errorf("sink: s3 bucket %q at %s: %w", b, s.endpointName(), err)
		}
	}
	return s, nil
}

func (s *Sink) endpointName() string {
	if s.opts.Endpoint != "" {
		return s.opts.Endpoint
	}
	return "AWS S3"
}

// String names the store as an s3:// URL, for logs.
func (s *Sink) String() string {
	return "s3://" + s.opts.Bucket + "/" + s.opts.Prefix
}

// encoding is the encoding of info objects.
func (s *Sink) encoding() events.Encoding {
	if s.opts.Encoding.Present && !s.opts.Encoding.Null {
		return s.opts.Encoding.Value
	}
	return events.Msgpack
}

func (s *Sink) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	return nil
}

// Flush returns once every write of the Apply calls that returned is in
// S3: at once, since Apply writes synchronously. It exists so that an S3
// is driven like every sink (Flush, then ack).
func (s *Sink) Flush(ctx context.Context) error {
	return s.check(ctx)
}

// Close releases the sink; it cannot be used afterwards.
func (s *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s.lease.Close(ctx)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// acquire takes a write slot (Concurrency bounds them).
func (s *Sink) acquire(ctx context.Context) (release func(), err error) {
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// useHead says whether existence is checked with HEAD before a PUT rather
// than with If-None-Match.
func (s *Sink) useHead() bool {
	if s.opts.Conditional == condHead {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headMode
}

// ------------------------------------------------------------- keys

// factoryBase is the all-S3 factory's base prefix from a URL's path: ""
// or ending in "/".
func factoryBase(prefix string) string {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return prefix
}

// modelPrefix is the resource store prefix of a model.
func (s *Sink) modelPrefix(model string) string {
	return strings.ReplaceAll(s.opts.Prefix, modelPlaceholder, model)
}

func (s *Sink) storeKey(model, uid, name string) string {
	return s.modelPrefix(model) + "resources/store/" + uid + "/" + name
}

func (s *Sink) resourceDir(model, resourceID string) string {
	return s.modelPrefix(model) + "resources/resource/" + resourceID + "/"
}

func (s *Sink) indexKey(model, resourceID, revisionID string, sv events.Opt[string]) string {
	return s.resourceDir(model, resourceID) + revisionID + "/" + store.SchemaDir(sv) + "/uid"
}

func (s *Sink) blobKey(fileID string) string { return s.opts.BlobPrefix + fileID }

// objURL names an object in errors.
func objURL(bucket, key string) string { return "s3://" + bucket + "/" + key }

// checkKeyLen refuses identifiers that make a key longer than S3 allows.
func checkKeyLen(what, key string) error {
	if len(key) > maxS3KeyLen {
		return store.Invalidf(what, "makes the S3 key %d bytes long, longer than S3 allows (%d)", len(key), maxS3KeyLen)
	}
	return nil
}

// ----------------------------------------------------------- errors

// errClosed is the error of a call on a closed sink.
var errClosed = errors.New("sink: s3 is closed")

// s3Status is the HTTP status of a failed request, 0 if it got none.
func s3Status(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func s3Code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// isNotFound reports a missing object (or bucket).
func isNotFound(err error) bool {
	switch s3Code(err) {
	case "NoSuchKey", "NotFound", "NoSuchBucket":
		return true
	}
	return s3Status(err) == http.StatusNotFound
}

// isNoSuchKey reports a missing object in an existing bucket.
func isNoSuchKey(err error) bool {
	return isNotFound(err) && s3Code(err) != "NoSuchBucket"
}

// isPreconditionFailed reports a 412: If-None-Match found the object.
func isPreconditionFailed(err error) bool {
	return s3Status(err) == http.StatusPreconditionFailed || s3Code(err) == "PreconditionFailed"
}

// isConditionalUnsupported reports a server refusing If-None-Match (or
// If-Match) on a write as a feature it lacks (rather than the object existing).
func isConditionalUnsupported(err error) bool {
	if s3Code(err) == "NotImplemented" || s3Status(err) == http.StatusNotImplemented {
		return true
	}
	var ae smithy.APIError
	return s3Status(err) == http.StatusBadRequest && errors.As(err, &ae) &&
		(strings.Contains(strings.ToLower(ae.ErrorMessage()), "if-none-match") ||
			strings.Contains(strings.ToLower(ae.ErrorMessage()), "if-match"))
}
