package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Exclusive holds the store for the caller alone (a restore), as an
// advisory lock holds Postgres tables (see sink.Exclusive): it fails with
// a *lease.HeldError while another process writes the same keys, and
// from then on every other writer's writes are refused until Close. The
// leases are keys {prefix before the model}.specstar-replicator:lease:*,
// which expire by themselves (see sink/internal/lease).
func (s *Sink) Exclusive(ctx context.Context) error { return s.lease.Exclusive(ctx) }

// leaseStore keeps the leases of a Sink as keys with a time to live:
// SET NX to create, a compare-and-set script to replace.
type leaseStore struct{ s *Sink }

func (l leaseStore) key(name string) string {
	before, _, _ := strings.Cut(l.s.opts.Prefix, ModelPlaceholder)
	return before + ".specstar-replicator:lease:" + name
}

func (l leaseStore) Create(ctx context.Context, name string, body []byte, ttl time.Duration) (bool, error) {
	ok, err := l.s.rdb.SetNX(ctx, l.key(name), body, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("%s: lease %s: %w", l.s.addr, l.key(name), err)
	}
	return ok, nil
}

// replaceScript sets KEYS[1] to ARGV[2] with a time to live of ARGV[3] ms
// only if it still holds ARGV[1].
var replaceScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
`)

func (l leaseStore) Replace(ctx context.Context, name string, body []byte, version string, ttl time.Duration) (bool, error) {
	n, err := replaceScript.Run(ctx, l.s.rdb, []string{l.key(name)}, version, body, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("%s: lease %s: %w", l.s.addr, l.key(name), err)
	}
	return n == 1, nil
}

func (l leaseStore) Put(ctx context.Context, name string, body []byte, ttl time.Duration) error {
	if err := l.s.rdb.Set(ctx, l.key(name), body, ttl).Err(); err != nil {
		return fmt.Errorf("%s: lease %s: %w", l.s.addr, l.key(name), err)
	}
	return nil
}

func (l leaseStore) Get(ctx context.Context, name string) ([]byte, string, bool, error) {
	b, err := l.s.rdb.Get(ctx, l.key(name)).Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, "", false, nil
	case err != nil:
		return nil, "", false, fmt.Errorf("%s: lease %s: %w", l.s.addr, l.key(name), err)
	}
	return b, string(b), true, nil
}

func (l leaseStore) List(ctx context.Context, prefix string) ([]string, error) {
	base := l.key("")
	var names []string
	it := l.s.rdb.Scan(ctx, 0, globEscape(base+prefix)+"*", 1000).Iterator()
	for it.Next(ctx) {
		names = append(names, strings.TrimPrefix(it.Val(), base))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("%s: leases %s*: %w", l.s.addr, base+prefix, err)
	}
	return names, nil
}

func (l leaseStore) Delete(ctx context.Context, name string) error {
	if err := l.s.rdb.Del(ctx, l.key(name)).Err(); err != nil {
		return fmt.Errorf("%s: lease %s: %w", l.s.addr, l.key(name), err)
	}
	return nil
}
