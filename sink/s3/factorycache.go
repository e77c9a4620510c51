package s3

// The factory's local copies of meta.db files: found, kept fresh by
// ETag, evicted, downloaded.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/sink/internal/sqlitemeta"
)

// files are the known copies, by model name.
func (f *Factory) files() []*metaFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*metaFile, 0, len(f.metas))
	for _, mf := range f.metas {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *metaFile) int { return cmp.Compare(a.model, b.model) })
	return out
}

// where names a model's meta store in errors.
func (f *Factory) where(mf *metaFile) string {
	return objURL(f.opts.Bucket, f.metaKey(mf.model))
}

// file returns the model's local copy, locked and loaded (downloaded on
// first use, or after it was evicted); the caller unlocks mf.mu.
func (f *Factory) file(ctx context.Context, model string) (*metaFile, error) {
	f.mu.Lock()
	mf := f.metas[model]
	if mf == nil {
		mf = &metaFile{model: model, path: filepath.Join(f.cacheDir, fmt.Sprintf("%x.db", xxh3.HashString128(model).Bytes()))}
		f.metas[model] = mf
	}
	f.clock++
	mf.used = f.clock
	f.mu.Unlock()
	mf.mu.Lock()
	if mf.db == nil {
		if err := f.download(ctx, mf); err != nil {
			mf.mu.Unlock()
			return nil, err
		}
		f.evict(mf)
	}
	return mf, nil
}

// fresh is file for a read: a copy holding nothing pending is first
// checked against the object's ETag (at most once per refresh interval)
// and downloaded again if another writer changed it.
func (f *Factory) fresh(ctx context.Context, model string) (*metaFile, error) {
	mf, err := f.file(ctx, model)
	if err != nil {
		return nil, err
	}
	if len(mf.pending) > 0 || time.Since(mf.checked) < f.refreshAfter() {
		return mf, nil
	}
	h, err := f.head(ctx, f.opts.Bucket, f.metaKey(model))
	if err == nil && (h != nil != mf.exists || headETag(h) != mf.etag) {
		err = f.download(ctx, mf)
	}
	if err != nil {
		mf.mu.Unlock()
		return nil, err
	}
	mf.checked = time.Now()
	return mf, nil
}

// evict unloads the least recently used clean copies beyond CacheModels
// (keep is the one just loaded, and locked), so that local disk and open
// handles stay bounded; they are downloaded again when needed. Copies in
// use by another call are neither counted nor unloaded.
func (f *Factory) evict(keep *metaFile) {
	f.mu.Lock()
	type entry struct {
		mf   *metaFile
		used uint64
	}
	all := make([]entry, 0, len(f.metas))
	for _, mf := range f.metas {
		if mf != keep {
			all = append(all, entry{mf, mf.used})
		}
	}
	f.mu.Unlock()
	if len(all)+1 <= f.opts.CacheModels {
		return
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Compare(a.used, b.used) })
	var loaded []*metaFile // locked
	for _, e := range all {
		if !e.mf.mu.TryLock() {
			continue
		}
		if e.mf.db == nil {
			e.mf.mu.Unlock()
			continue
		}
		loaded = append(loaded, e.mf)
	}
	excess := len(loaded) + 1 - f.opts.CacheModels
	for _, mf := range loaded {
		if excess > 0 && len(mf.pending) == 0 {
			mf.db.Close()
			mf.db = nil
			removeCopy(mf.path)
			excess--
		}
		mf.mu.Unlock()
	}
}

func removeCopy(path string) {
	for _, p := range []string{path, path + "-journal", path + ".part"} {
		_ = os.Remove(p)
	}
}

// download replaces the copy with the object (a new, empty meta store
// when there is none) and remembers its ETag. mf is locked.
func (f *Factory) download(ctx context.Context, mf *metaFile) error {
	if mf.db != nil {
		mf.db.Close()
		mf.db = nil
	}
	removeCopy(mf.path)
	bucket, key := f.opts.Bucket, f.metaKey(mf.model)
	out, err := f.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	switch {
	case err != nil && isNoSuchKey(err):
		mf.exists, mf.etag = false, ""
	case err != nil:
		return fmt.Errorf("sink: s3 get %s: %w", objURL(bucket, key), err)
	default:
		err := writeFile(mf.path+".part", out.Body)
		out.Body.Close()
		if err == nil {
			err = os.Rename(mf.path+".part", mf.path)
		}
		if err != nil {
			return fmt.Errorf("sink: s3 get %s: %w", objURL(bucket, key), err)
		}
		mf.exists, mf.etag = true, aws.ToString(out.ETag)
	}
	db, err := sqlitemeta.Open(ctx, mf.path, true)
	if err != nil {
		removeCopy(mf.path)
		return fmt.Errorf("sink: s3 meta store %s: %w", objURL(bucket, key), err)
	}
	mf.db, mf.checked = db, time.Now()
	return nil
}

func writeFile(path string, r io.Reader) error {
	w, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
