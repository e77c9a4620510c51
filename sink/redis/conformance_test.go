package redis_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/redistest"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/layered"
	"github.com/specstar/replicator/sink/redis"
	"github.com/specstar/replicator/sink/sinktest"
)

// openStore opens a Redis meta store under prefix (a fresh one when "").
func openStore(t testing.TB, prefix string, enc events.Encoding) *redis.Sink {
	t.Helper()
	if prefix == "" {
		prefix = redistest.Prefix(t) + redis.ModelPlaceholder + ":"
	}
	spec, err := redis.ParseSpec(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	st, err := redis.Open(context.Background(), spec.Client, redis.Options{Prefix: prefix, Encoding: enc})
	if err != nil {
		t.Fatalf("open the Redis meta store (start redis-server or set REDIS_URL): %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// dumpKeys lists every key of st's prefix (any model) in byte order,
// with its value; the prefix's text before the model is left out, as it
// differs between stores.
func dumpKeys(t *testing.T, st *redis.Sink) string {
	t.Helper()
	ctx := context.Background()
	prefix := st.Options().Prefix
	pattern := strings.ReplaceAll(prefix, redis.ModelPlaceholder, "*") + "*"
	own, _, _ := strings.Cut(prefix, redis.ModelPlaceholder)
	var keys []string
	iter := st.Client().Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		if strings.Contains(iter.Val(), ".specstar-replicator:") {
			continue // the replicator's own leases, not SpecStar's data
		}
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan %s: %v", pattern, err)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range slices.Compact(keys) { // SCAN may return a key twice
		v, err := st.Client().Get(ctx, k).Bytes()
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		fmt.Fprintf(&b, "%q %x\n", strings.TrimPrefix(k, own), v)
	}
	return b.String()
}

// TestConformance runs the sink conformance suite against the Redis meta
// store alone (metas only, in both encodings), and as the meta layer of a
// deployment whose revisions and blobs are on disk, as SpecStar's
// fast meta store is used.
func TestConformance(t *testing.T) {
	for _, enc := range []events.Encoding{events.JSON, events.Msgpack} {
		t.Run("alone/"+enc.String(), func(t *testing.T) {
			var mu sync.Mutex
			prefixes := map[sink.Sink]string{}
			open := func(t *testing.T, prefix string) sink.Sink {
				st := openStore(t, prefix, enc)
				mu.Lock()
				prefixes[st] = st.Options().Prefix
				mu.Unlock()
				return st
			}
			sinktest.Run(t, sinktest.Backend{
				Open: func(t *testing.T) sink.Sink { return open(t, "") },
				Reopen: func(t *testing.T, s sink.Sink) sink.Sink {
					mu.Lock()
					p := prefixes[s]
					mu.Unlock()
					return open(t, p)
				},
				Metas:  true,
				Queued: true, // Flush decides newer-wins
				Dump:   func(t *testing.T, s sink.Sink) string { return dumpKeys(t, s.(*redis.Sink)) },
			})
		})
	}
	t.Run("redis+disk", func(t *testing.T) {
		type where struct{ prefix, root string }
		var (
			mu     sync.Mutex
			places = map[sink.Sink]where{}
			disks  = map[string]*disk.Sink{} // the open disk store of each root
		)
		build := func(t *testing.T, w where) sink.Sink {
			t.Helper()
			meta := openStore(t, w.prefix, events.JSON)
			w.prefix = meta.Options().Prefix
			if w.root == "" {
				w.root = filepath.Join(t.TempDir(), "root")
			}
			mu.Lock()
			if prev := disks[w.root]; prev != nil {
				// A reopen after a simulated crash: a dead process's disk
				// writer lock dies with it, so the abandoned disk store
				// lets go of the tree (its writes are on disk already).
				prev.Close()
			}
			res, err := disk.Open(context.Background(), w.root, disk.Options{})
			if err == nil {
				disks[w.root] = res
			}
			mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			l := layered.New("conformance", meta, res, res)
			t.Cleanup(func() { l.Close() })
			mu.Lock()
			places[l] = w
			mu.Unlock()
			return l
		}
		sinktest.Run(t, sinktest.Backend{
			Open: func(t *testing.T) sink.Sink { return build(t, where{}) },
			Reopen: func(t *testing.T, s sink.Sink) sink.Sink {
				mu.Lock()
				w := places[s]
				mu.Unlock()
				return build(t, w)
			},
			Metas: true, Revisions: true, Blobs: true,
			Queued:          true, // Flush decides newer-wins
			PathRevisionIDs: true,
			Outside: func(t *testing.T, s sink.Sink) string {
				mu.Lock()
				w := places[s]
				mu.Unlock()
				entries, err := os.ReadDir(filepath.Dir(w.root))
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				return strings.Join(names, " ")
			},
		})
	})
}
