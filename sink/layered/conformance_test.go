package layered_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/layered"
	"github.com/specstar/replicator/sink/postgres"
	"github.com/specstar/replicator/sink/s3"
	"github.com/specstar/replicator/sink/sinktest"
)

// TestConformance runs the sink conformance suite against the layered
// sink of SpecStar's deployments: metas in Postgres, revisions and blobs
// in S3 (the Postgres+S3 factory) or on disk.
func TestConformance(t *testing.T) {
	t.Run("postgres+s3", func(t *testing.T) {
		srv := s3test.Start(t)
		for _, kv := range srv.Env() { // the credentials, for s3.Open
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		var n atomic.Int64
		sinktest.Run(t, layeredBackend(func(t *testing.T, dest *string) layered.Store {
			if *dest == "" {
				*dest = fmt.Sprintf("conformance-%d", n.Add(1))
				srv.CreateBucket(t, *dest)
			}
			st, err := s3.Open(context.Background(), s3.Options{
				Bucket: *dest, Endpoint: srv.Endpoint, PathStyle: true, Region: srv.Region,
			})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}, false))
	})
	t.Run("postgres+disk", func(t *testing.T) {
		var mu sync.Mutex
		opened := map[string]*disk.Sink{}
		sinktest.Run(t, layeredBackend(func(t *testing.T, dest *string) layered.Store {
			if *dest == "" {
				*dest = filepath.Join(t.TempDir(), "root")
			}
			mu.Lock()
			defer mu.Unlock()
			if prev := opened[*dest]; prev != nil {
				// A reopen after a simulated crash: a dead process's disk
				// writer lock dies with it, so the abandoned disk store lets
				// go of the tree (its writes are on disk already; only the
				// Postgres meta store's queue is abandoned unflushed).
				prev.Close()
			}
			st, err := disk.Open(context.Background(), *dest, disk.Options{})
			if err == nil {
				opened[*dest] = st
			}
			if err != nil {
				t.Fatal(err)
			}
			return st
		}, true))
	})
}

// layeredBackend is a layered sink over a Postgres meta store (a fresh
// table prefix per Open) and a store for revisions and blobs that open
// opens at *dest (choosing *dest when it is "").
func layeredBackend(open func(t *testing.T, dest *string) layered.Store, diskRevisions bool) sinktest.Backend {
	type where struct{ prefix, dest string }
	var (
		mu     sync.Mutex
		places = map[sink.Sink]where{}
	)
	build := func(t *testing.T, w where) sink.Sink {
		t.Helper()
		meta, err := postgres.Open(context.Background(), pgDSN(), postgres.Options{TablePrefix: w.prefix})
		if err != nil {
			t.Fatalf("cannot open the Postgres sink (set PG_DSN to a reachable server): %v", err)
		}
		res := open(t, &w.dest)
		l := layered.New("conformance", meta, res, res)
		t.Cleanup(func() { l.Close() })
		mu.Lock()
		places[l] = w
		mu.Unlock()
		return l
	}
	b := sinktest.Backend{
		Open: func(t *testing.T) sink.Sink { return build(t, where{prefix: pgPrefix(t)}) },
		Reopen: func(t *testing.T, s sink.Sink) sink.Sink {
			mu.Lock()
			w := places[s]
			mu.Unlock()
			return build(t, w)
		},
		Metas: true, Revisions: true, Blobs: true,
		Queued: true,
		// Postgres queues metas and keys them by column; revisions and
		// blobs go to a store keyed by path.
		PathRevisionIDs: true,
	}
	if diskRevisions {
		b.Outside = func(t *testing.T, s sink.Sink) string {
			mu.Lock()
			w := places[s]
			mu.Unlock()
			return treeOutside(t, filepath.Dir(w.dest))
		}
	}
	return b
}

// treeOutside lists the entries of dir, the disk root's parent: a refused
// record escaping the root would add one.
func treeOutside(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

func pgDSN() string { return pgtest.SharedDSN() }

// pgPrefix returns a fresh table prefix whose tables are dropped when the
// test ends.
func pgPrefix(t *testing.T) string { return pgtest.Prefix(t) }
