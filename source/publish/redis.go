package publish

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/redis"
)

// redisFlushEvery is how long published events of a Redis tail may wait
// for their acknowledgements before the tail waits for them (and a
// failed publish surfaces).
const redisFlushEvery = time.Second

// TailRedis publishes a Redis (or fast/slow) deployment's records, then
// every meta that becomes newer with its revisions and blobs (see
// redis.Source.Follow), until ctx ends. No position is kept: Redis keeps
// no change log to resume from, so a restart publishes the whole snapshot
// again, which the stream's duplicate window and the sinks' idempotence
// absorb. Losing Redis or the stream is waited out with backoff; each
// attempt starts with a full scan. It returns ctx's error when
// interrupted.
func (p *Publisher) TailRedis(ctx context.Context, src *redis.Source, o redis.FollowOptions) error {
	if o.Log == nil {
		o.Log = p.log
	}
	bo := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(0), backoff.WithMaxInterval(30*time.Second))
	for {
		started := time.Now()
		if p.hooks.Streaming != nil {
			p.hooks.Streaming(true)
		}
		err := p.followRedis(ctx, src, o)
		if p.hooks.Streaming != nil {
			p.hooks.Streaming(false)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(started) > time.Minute {
			bo.Reset()
		}
		wait := bo.NextBackOff()
		p.log.Warn("redis tail lost its source or the stream; starting again", "err", err, "in", wait)
		if p.hooks.Restarted != nil {
			p.hooks.Restarted()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// followRedis is one attempt of TailRedis.
func (p *Publisher) followRedis(ctx context.Context, src *redis.Source, o redis.FollowOptions) error {
	var st RecordStats
	last := time.Now()
	err := src.Follow(ctx, o, func(r source.Record) error {
		if err := p.record(ctx, r, &st); err != nil {
			return err
		}
		if time.Since(last) > redisFlushEvery {
			last = time.Now()
			return p.Flush(ctx)
		}
		return nil
	})
	if ferr := p.Flush(context.WithoutCancel(ctx)); err == nil || errors.Is(err, context.Canceled) {
		if ferr != nil {
			return ferr
		}
	}
	return err
}
