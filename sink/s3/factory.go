package s3

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/cenkalti/backoff/v4"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sqlitemeta"
	"github.com/specstar/replicator/sink/internal/store"
)

// metaDBName is the object, below a model's prefix, holding the all-S3
// factory's meta store of that model.
const metaDBName = "meta.db"

// maxConflictRetries bounds how often one Flush reloads a meta.db another
// writer changed and tries again before it gives up (and the batch is
// retried by the replicator).
const maxConflictRetries = 8

// errConflict says another writer changed a meta.db since it was read.
var errConflict = errors.New("meta.db changed by another writer")

// Factory writes and reads SpecStar's all-S3 storage factory, everything
// in one bucket and no database:
//
//	{base}{model}/meta.db                                  SQLite resource_meta table (FileSqliteMetaStore)
//	{base}{model}/resources/store/{uid}/data|info          revisions (an S3ResourceStore with prefix {base}{model}/)
//	{base}{model}/resources/resource/{rid}/{rev}/{p_sv}/uid
//	{base}blobs/{file_id}                                  raw blob bytes
//
// json-encoded by default, as SpecStar's factory. Revisions and blobs are
// written by the embedded Sink, synchronously. Metas go to a local copy of
// each model's meta.db (downloaded on the model's first use) and the
// whole file is uploaded by Flush, only over the object it was read from:
// a PUT with If-Match on the ETag last seen (If-None-Match: * for a model's
// first meta.db), preceded by a HEAD comparing that ETag, as SpecStar's
// own optimistic lock does. When another writer uploaded in between, the
// file is downloaded again, the batch's metas are applied to it again
// (newer wins) and the upload retried with backoff: another writer's rows
// are never overwritten.
type Factory struct {
	*Sink
	cacheDir string
	// cacheLock is held on cacheDir's lock file while the factory is
	// open, so a later process removes the directory only once this one
	// is gone.
	cacheLock *os.File
	refresh   time.Duration // a clean copy's ETag is checked again after this long, for reads

	mu    sync.Mutex
	metas map[string]*metaFile
	clock uint64

	conflicts atomic.Int64 // uploads refused because another writer was first

	// beforePut, in tests, runs between an upload's HEAD and its PUT.
	beforePut func()
}

// metaFile is the local copy of one model's meta.db.
type metaFile struct {
	mu      sync.Mutex // held while the copy is used, reloaded or uploaded
	model   string
	path    string
	db      *sql.DB   // nil: not loaded (never, or evicted)
	exists  bool      // the object existed when the copy was last read or written
	etag    string    // its ETag then
	checked time.Time // when exists/etag were last confirmed
	pending []metaOp  // applied to the copy, not yet uploaded
	used    uint64    // LRU clock
}

// metaOp is one change applied to a local copy and not yet uploaded, kept
// to apply it again to a newer copy after a conflict.
type metaOp struct {
	meta     *events.ResourceMeta // a meta written; nil for a purge
	encoded  []byte
	purgeID  string // a meta removed by a purge
	purgedAt events.Time
}

// OpenFactory opens the all-S3 factory opts names (opts.Factory set) with
// credentials from the default AWS chain, checking that the bucket
// exists. Nothing is written until a record is applied; the local meta.db
// copies live in a directory of their own below opts.CacheDir, removed by
// Close.
func OpenFactory(ctx context.Context, opts Options) (*Factory, error) {
	return openFactory(ctx, opts)
}

func openFactory(ctx context.Context, opts Options, loadOpts ...func(*config.LoadOptions) error) (*Factory, error) {
	if !opts.Factory {
		return nil, errors.New("sink: s3: not a factory (factory=s3)")
	}
	s, err := openS3(ctx, opts, loadOpts...)
	if err != nil {
		return nil, err
	}
	dir, lock, err := makeCacheDir(s.opts.CacheDir)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("sink: s3 factory %s: %w", s, err)
	}
	return &Factory{Sink: s, cacheDir: dir, cacheLock: lock, refresh: time.Second, metas: map[string]*metaFile{}}, nil
}

// String names the factory as its s3:// URL, for logs.
func (f *Factory) String() string {
	return "s3://" + f.opts.Bucket + "/" + f.base() + "?factory=s3"
}

// base is the factory's prefix, below which each model has its own.
func (f *Factory) base() string {
	return strings.TrimSuffix(f.opts.Prefix, modelPlaceholder+"/")
}

// SetRefresh sets how long reads trust a local copy holding nothing
// pending before they compare the object's ETag again (1 s by default); 0
// checks on every read, and a source reading one snapshot sets it longer
// than its reading takes.
func (f *Factory) SetRefresh(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh = d
}

func (f *Factory) refreshAfter() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refresh
}

// Refresh compares the model's local copy with its meta.db object now,
// downloading it again if another writer changed it (unless this process
// has metas pending there), and returns the object's ETag ("" when there
// is none), so a follower can tell whether the model changed.
func (f *Factory) Refresh(ctx context.Context, model string) (string, error) {
	if err := store.CheckModel(model); err != nil {
		return "", err
	}
	mf, err := f.file(ctx, model)
	if err != nil {
		return "", err
	}
	defer mf.mu.Unlock()
	if len(mf.pending) > 0 {
		return mf.etag, nil
	}
	h, err := f.head(ctx, f.opts.Bucket, f.metaKey(model))
	if err != nil {
		return "", err
	}
	if h != nil != mf.exists || headETag(h) != mf.etag {
		if err := f.download(ctx, mf); err != nil {
			return "", err
		}
	}
	mf.checked = time.Now()
	return mf.etag, nil
}

func (f *Factory) metaKey(model string) string { return f.modelPrefix(model) + metaDBName }

// Conflicts counts the uploads another writer's change refused (each
// followed by a reload and a retry), for tests and metrics.
func (f *Factory) Conflicts() int64 { return f.conflicts.Load() }

// ------------------------------------------------------------ writes

// ApplyMeta writes the meta into the local copy of the model's meta.db if
// it is newer than the stored one (the rule of every meta store: updated
// time, then revision count, then bytes); Flush uploads it. The row is the
// contract's, computed as SpecStar's SqliteMetaStore does.
func (f *Factory) ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error) {
	if err := f.writable(ctx); err != nil {
		return 0, err
	}
	if meta == nil {
		return 0, store.Invalid("meta", "nil")
	}
	if err := store.CheckModel(model); err != nil {
		return 0, err
	}
	// A resource id that cannot be a key segment could never have
	// revisions here: refused, as by every resource store.
	if err := store.CheckResourceID(meta.ResourceID); err != nil {
		return 0, err
	}
	if err := checkKeyLen(fmt.Sprintf("model %q", model), f.metaKey(model)); err != nil {
		return 0, err
	}
	enc := f.encoding()
	encoded, err := meta.Encode(enc)
	if err != nil {
		return 0, store.Invalidf(fmt.Sprintf("meta %q", meta.ResourceID), "cannot be encoded in %v: %v", enc, err)
	}
	if _, err := sqlitemeta.Row(meta, encoded); err != nil {
		return 0, err
	}
	mf, err := f.file(ctx, model)
	if err != nil {
		return 0, err
	}
	defer mf.mu.Unlock()
	out, err := f.put(ctx, mf, meta, encoded)
	if err == nil && out == store.Written {
		mf.pending = append(mf.pending, metaOp{meta: meta, encoded: encoded})
	}
	return out, err
}

// put is ApplyMeta on a locked, loaded copy.
func (f *Factory) put(ctx context.Context, mf *metaFile, meta *events.ResourceMeta, encoded []byte) (store.Outcome, error) {
	enc := f.encoding()
	return sqlitemeta.Put(ctx, mf.db, f.where(mf), meta, encoded, func(existing []byte) (store.Outcome, error) {
		if existing == nil {
			return store.Written, nil
		}
		if bytes.Equal(existing, encoded) {
			return store.Unchanged, nil
		}
		old, err := events.DecodeResourceMeta(enc, existing)
		if err != nil {
			return store.Written, nil // a broken row no SpecStar reader could use: replaced
		}
		if store.CompareMeta(meta, encoded, old, existing) > 0 {
			return store.Written, nil
		}
		return store.Stale, nil
	})
}

// remove is a purge's meta removal on a locked, loaded copy: Stale when
// the stored meta was updated after purgedAt (a re-creation).
func (f *Factory) remove(ctx context.Context, mf *metaFile, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	enc := f.encoding()
	return sqlitemeta.Delete(ctx, mf.db, f.where(mf), resourceID, func(existing []byte) bool {
		m, err := events.DecodeResourceMeta(enc, existing)
		return err == nil && m.UpdatedTime.Instant().After(purgedAt.Instant())
	})
}

// ApplyPurge removes a permanently deleted resource: its meta row, unless
// the stored meta is newer than purgedAt (Stale: a re-creation, whose
// revisions stay too), uploaded at once so that no meta outlives the
// revisions it names; then its revisions, as the S3 resource store
// purges them.
func (f *Factory) ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	if err := f.writable(ctx); err != nil {
		return 0, err
	}
	if err := store.CheckModel(model); err != nil {
		return 0, err
	}
	if err := store.CheckResourceID(resourceID); err != nil {
		return 0, err
	}
	mf, err := f.file(ctx, model)
	if err != nil {
		return 0, err
	}
	out, err := f.remove(ctx, mf, resourceID, purgedAt)
	if err != nil || out == store.Stale {
		mf.mu.Unlock()
		return out, err
	}
	if out == store.Written {
		mf.pending = append(mf.pending, metaOp{purgeID: resourceID, purgedAt: purgedAt})
	}
	if len(mf.pending) > 0 {
		err = f.upload(ctx, mf)
	}
	mf.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("sink: s3 factory purge %q: %w", resourceID, err)
	}
	rout, err := f.Sink.ApplyPurge(ctx, model, resourceID, purgedAt)
	if err != nil {
		return 0, err
	}
	if rout == store.Written {
		out = store.Written
	}
	return out, nil
}

// Flush uploads every meta.db copy holding metas not yet uploaded, each
// only over the object it was read from (see Factory); revisions and blobs
// are already in S3.
func (f *Factory) Flush(ctx context.Context) error {
	if err := f.check(ctx); err != nil {
		return err
	}
	for _, mf := range f.files() {
		mf.mu.Lock()
		var err error
		if len(mf.pending) > 0 {
			err = f.upload(ctx, mf)
		}
		mf.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// Close uploads what is pending, releases the local copies and removes
// them; the Factory cannot be used afterwards.
func (f *Factory) Close() error {
	err := f.Flush(context.Background())
	if errors.Is(err, errClosed) {
		err = nil
	}
	for _, mf := range f.files() {
		mf.mu.Lock()
		if mf.db != nil {
			if cerr := mf.db.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("sink: close %s: %w", mf.path, cerr))
			}
			mf.db = nil
		}
		mf.mu.Unlock()
	}
	if rerr := os.RemoveAll(f.cacheDir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("sink: s3 factory cache: %w", rerr))
	}
	if f.cacheLock != nil {
		f.cacheLock.Close() // after the removal: a sweep never races it
		f.cacheLock = nil
	}
	return errors.Join(err, f.Sink.Close())
}

// upload puts the copy over the object it was read from, retrying after
// a reload when another writer was first. mf is locked.
func (f *Factory) upload(ctx context.Context, mf *metaFile) error {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(20*time.Millisecond), backoff.WithMaxInterval(2*time.Second))
	tries := 0
	err := backoff.Retry(func() error {
		tries++
		err := f.putFile(ctx, mf)
		if err == nil {
			mf.pending = nil
			return nil
		}
		if !errors.Is(err, errConflict) {
			return backoff.Permanent(err)
		}
		f.conflicts.Add(1)
		if rerr := f.reapply(ctx, mf); rerr != nil {
			return backoff.Permanent(rerr)
		}
		if len(mf.pending) == 0 {
			return nil // the other writer's file already holds everything newer
		}
		return err
	}, backoff.WithContext(backoff.WithMaxRetries(bo, maxConflictRetries), ctx))
	if errors.Is(err, errConflict) {
		return fmt.Errorf("sink: s3 put %s: %w %d times in a row; the batch will be retried", objURL(f.opts.Bucket, f.metaKey(mf.model)), err, tries)
	}
	return err
}

// reapply downloads the object again and applies the copy's pending
// changes to it; those the newer file makes no-ops are dropped.
func (f *Factory) reapply(ctx context.Context, mf *metaFile) error {
	ops := mf.pending
	mf.pending = nil
	if err := f.download(ctx, mf); err != nil {
		mf.pending = ops // not lost: the copy is reloaded on next use
		return err
	}
	for _, op := range ops {
		var (
			out store.Outcome
			err error
		)
		if op.meta != nil {
			out, err = f.put(ctx, mf, op.meta, op.encoded)
		} else {
			out, err = f.remove(ctx, mf, op.purgeID, op.purgedAt)
		}
		if err != nil {
			return err
		}
		if out == store.Written {
			mf.pending = append(mf.pending, op)
		}
	}
	return nil
}

// putFile uploads the copy once. It first compares the object's ETag
// with the one the copy was read from (a HEAD: another writer's upload is
// caught even on a server that ignores If-Match), then PUTs with If-Match
// (If-None-Match: * when there was no object), so that on a server
// honouring them no upload can slip in between; on one rejecting them as
// unsupported (Conditional "auto") the HEAD alone guards the PUT, and on
// Conditional "head" too. A refused precondition is errConflict.
func (f *Factory) putFile(ctx context.Context, mf *metaFile) error {
	bucket, key := f.opts.Bucket, f.metaKey(mf.model)
	h, err := f.head(ctx, bucket, key)
	if err != nil {
		return err
	}
	if exists, etag := h != nil, headETag(h); exists != mf.exists || etag != mf.etag {
		return errConflict
	}
	if f.beforePut != nil {
		f.beforePut()
	}
	file, err := os.Open(mf.path)
	if err != nil {
		return fmt.Errorf("sink: s3 factory: %w", err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return fmt.Errorf("sink: s3 factory: %w", err)
	}
	in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: file, ContentLength: aws.Int64(st.Size())}
	conditional := !f.useHead()
	if conditional {
		if mf.exists {
			in.IfMatch = aws.String(mf.etag)
		} else {
			in.IfNoneMatch = aws.String("*")
		}
	}
	release, err := f.acquire(ctx)
	if err != nil {
		return err
	}
	out, err := f.client.PutObject(ctx, in)
	release()
	switch {
	case err == nil:
	case isPreconditionFailed(err):
		return errConflict
	case conditional && f.fallBackToHead(err):
		return f.putFile(ctx, mf)
	default:
		return fmt.Errorf("sink: s3 put %s: %w", objURL(bucket, key), err)
	}
	etag := aws.ToString(out.ETag)
	if etag == "" { // a server not answering the ETag: ask
		h, err := f.head(ctx, bucket, key)
		if err != nil {
			return err
		}
		etag = headETag(h)
	}
	mf.exists, mf.etag, mf.checked = true, etag, time.Now()
	return nil
}

func headETag(h *s3.HeadObjectOutput) string {
	if h == nil {
		return ""
	}
	return aws.ToString(h.ETag)
}
