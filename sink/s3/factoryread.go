package s3

// Reading the factory back: metas, models and resource ids, as
// sink.Reader and sink.Lister.

import (
	"context"
	"fmt"
	"io/fs"
	"iter"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sqlitemeta"
	"github.com/specstar/replicator/sink/internal/store"
)

// Meta reads a resource's meta from the model's meta.db (the local copy,
// with this process's metas not yet uploaded; a clean copy is re-read
// when the object changed). The error wraps fs.ErrNotExist if there is
// none.
func (f *Factory) Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	if err := store.CheckModel(model); err != nil {
		return nil, err
	}
	if err := store.CheckResourceID(resourceID); err != nil {
		return nil, err
	}
	mf, err := f.fresh(ctx, model)
	if err != nil {
		return nil, err
	}
	raw, ok, err := sqlitemeta.Get(ctx, mf.db, resourceID)
	where := f.where(mf)
	mf.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("sink: meta %s row %q: %w", where, resourceID, err)
	}
	if !ok {
		return nil, fmt.Errorf("sink: meta %s row %q: %w", where, resourceID, fs.ErrNotExist)
	}
	meta, err := events.DecodeResourceMeta(f.encoding(), raw)
	if err != nil {
		return nil, fmt.Errorf("sink: meta %s row %q: %w", where, resourceID, err)
	}
	return meta, nil
}

// Models lists, in byte order, the models with a meta.db holding at least
// one meta, so that a factory can be walked and pruned like any meta
// store.
func (f *Factory) Models(ctx context.Context) ([]string, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	base := f.base()
	var models []string
	p := s3.NewListObjectsV2Paginator(f.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(f.opts.Bucket), Prefix: aws.String(base), Delimiter: aws.String("/"),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("sink: s3 list %s: %w", objURL(f.opts.Bucket, base), err)
		}
		for _, cp := range page.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), base), "/")
			if store.CheckModel(name) != nil {
				continue
			}
			h, err := f.head(ctx, f.opts.Bucket, f.metaKey(name))
			if err != nil {
				return nil, err
			}
			if h == nil {
				continue
			}
			any, err := f.holdsMetas(ctx, name)
			if err != nil {
				return nil, err
			}
			if any {
				models = append(models, name)
			}
		}
	}
	slices.Sort(models)
	return models, nil
}

func (f *Factory) holdsMetas(ctx context.Context, model string) (bool, error) {
	mf, err := f.fresh(ctx, model)
	if err != nil {
		return false, err
	}
	defer mf.mu.Unlock()
	page, err := sqlitemeta.Page(ctx, mf.db, "")
	if err != nil {
		return false, fmt.Errorf("sink: list metas in %s: %w", f.where(mf), err)
	}
	return len(page) > 0, nil
}

// ResourceIDs yields the ids of the model's metas in byte order, a page at
// a time, so reconcile --prune can find resources only the factory holds.
func (f *Factory) ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := f.check(ctx); err != nil {
			yield("", err)
			return
		}
		if err := store.CheckModel(model); err != nil {
			yield("", err)
			return
		}
		after := ""
		for {
			mf, err := f.fresh(ctx, model)
			if err != nil {
				yield("", err)
				return
			}
			page, err := sqlitemeta.Page(ctx, mf.db, after)
			where := f.where(mf)
			mf.mu.Unlock()
			if err != nil {
				yield("", fmt.Errorf("sink: list metas in %s after %q: %w", where, after, err))
				return
			}
			for _, id := range page {
				if !yield(id, nil) {
					return
				}
			}
			if len(page) < store.ListPage {
				return
			}
			after = page[len(page)-1]
		}
	}
}
