// Package redistest gives tests the shared Redis server (REDIS_URL) with a
// key prefix of their own, removed when the test ends, so tests of the
// Redis meta store never see one another's keys.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// DefaultURL is the server tests use when REDIS_URL is unset: the
// machine's own, which .ci/run starts.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL is the server's URL: REDIS_URL, else DefaultURL.
func URL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Client connects to URL and fails the test, with what to do, when the
// server does not answer; it is closed when the test ends.
func Client(t testing.TB) *goredis.Client {
	t.Helper()
	opts, err := goredis.ParseURL(URL())
	if err != nil {
		t.Fatalf("REDIS_URL %q: %v", URL(), err)
	}
	c := goredis.NewClient(opts)
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		t.Fatalf("Redis at %s is not reachable (start redis-server or set REDIS_URL; .ci/run starts it): %v", opts.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a fresh key prefix, "t{hex}:", every key of which is
// deleted when the test ends; the server must be reachable.
func Prefix(t testing.TB) string {
	t.Helper()
	c := Client(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "t" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() { Clean(t, c, prefix) })
	return prefix
}

// Clean deletes every key starting with prefix.
func Clean(t testing.TB, c *goredis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			t.Errorf("clean Redis keys %s*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("clean Redis keys %s*: %v", prefix, err)
				return
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// SinkURL is URL with the sink options opts (e.g. "prefix=x&encoding=json")
// added to its query.
func SinkURL(opts string) string {
	u := URL()
	if strings.Contains(u, "?") {
		return u + "&" + opts
	}
	return u + "?" + opts
}
