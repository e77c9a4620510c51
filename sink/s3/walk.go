package s3

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// listObjects calls fn for every object under prefix, in key order, one
// paginated listing (1000 keys a page).
func (s *Sink) listObjects(ctx context.Context, bucket, prefix string, fn func(types.Object) error) error {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(bucket), Prefix: aws.String(prefix),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("sink: s3 list %s: %w", objURL(bucket, prefix), err)
		}
		for _, o := range page.Contents {
			if err := fn(o); err != nil {
				return err
			}
		}
	}
	return nil
}

// result is one fetched item of an orderedFetch, or why it failed.
type result[R any] struct {
	v   R
	err error
}

// orderedFetch runs fetch on the items list produces, at most workers at
// a time and at most 2*workers ahead of the consumer (so memory is
// bounded by configuration), and hands the results to use in list order,
// from the calling goroutine. The first error (of list, fetch or use)
// stops everything and is returned.
func orderedFetch[T, R any](ctx context.Context, workers int,
	list func(ctx context.Context, emit func(T) error) error,
	fetch func(context.Context, T) (R, error),
	use func(R) error,
) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan chan result[R], 2*workers)
	sem := make(chan struct{}, workers)
	var (
		wg      sync.WaitGroup
		listErr error
	)
	go func() {
		defer close(queue)
		listErr = list(ctx, func(item T) error {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			ch := make(chan result[R], 1)
			select {
			case queue <- ch:
			case <-ctx.Done():
				<-sem
				return ctx.Err()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				v, err := fetch(ctx, item)
				ch <- result[R]{v, err}
			}()
			return nil
		})
	}()
	var err error
	for ch := range queue {
		r := <-ch
		if err != nil {
			continue // draining after a failure
		}
		if r.err != nil {
			err = r.err
		} else {
			err = use(r.v)
		}
		if err != nil {
			cancel()
		}
	}
	wg.Wait()
	if err != nil {
		return err
	}
	return listErr
}
