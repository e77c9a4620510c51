package redis_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/sink"
	redissink "github.com/specstar/replicator/sink/redis"
	"github.com/specstar/replicator/source/internal/base"
	"github.com/specstar/replicator/source/redis"
)

// meta is version v of resource rid: v revisions, updated v seconds
// after its creation.
func meta(t *testing.T, rid string, v int64) *events.ResourceMeta {
	t.Helper()
	created, err := events.ParseTime("2024-05-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	updated, err := events.ParseTime(fmt.Sprintf("2024-05-01T00:%02d:%02dZ", v/60, v%60))
	if err != nil {
		t.Fatal(err)
	}
	return &events.ResourceMeta{
		CurrentRevisionID: fmt.Sprintf("%s:%d", rid, v), ResourceID: rid, SchemaVersion: events.Null[string](),
		TotalRevisionCount: v, CreatedTime: created, UpdatedTime: updated, CreatedBy: "a", UpdatedBy: "a",
		IndexedData: events.Some[events.Value](events.Map{}),
	}
}

// casDel deletes a key only if it still holds value, as a mover that
// never drops an update made while it copied the meta.
const casDel = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

// TestFastSlowMove runs SpecStar's fast/slow meta store against the
// source: metas are written to Redis (new resources, and newer versions
// of resources already moved), while a mover copies each into the slow
// store and then deletes it from Redis, as SpecStar's background task
// does. Snapshots taken meanwhile must hold every resource exactly once,
// never older than what was committed before they started, and Follow
// must yield every resource's versions in strictly increasing order and
// end on the last one, and no purge: nothing lost, nothing regressed.
func TestFastSlowMove(t *testing.T) {
	for _, slow := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"postgres", pgURL},
		{"sqlite", func(t *testing.T) string { return "disk:" + filepath.Join(t.TempDir(), "slow") + "?meta=sqlite" }},
	} {
		t.Run(slow.name, func(t *testing.T) { fastSlow(t, slow.url(t)) })
	}
}

func fastSlow(t *testing.T, slowURL string) {
	const resources, versions = 60, 6
	fastURL := redisURL(t, "")
	fast := openRedis(t, fastURL)
	slow, err := sink.Open(ctx, slowURL)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	// SpecStar creates its slow meta store when it starts: the store
	// exists (empty) before the first move.
	if _, err := slow.ApplyMeta(ctx, "issue", meta(t, "init", 1)); err != nil {
		t.Fatal(err)
	}
	if err := slow.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := slow.ApplyPurge(ctx, "issue", "init", meta(t, "init", 2).UpdatedTime); err != nil {
		t.Fatal(err)
	}
	if err := slow.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rid := func(i int) string { return fmt.Sprintf("issue:%03d", i) }
	var committed [resources]atomic.Int64
	write := func(i int, v int64) {
		if _, err := fast.Put(ctx, "issue", meta(t, rid(i), v)); err != nil {
			t.Error(err)
			return
		}
		for c := committed[i].Load(); c < v && !committed[i].CompareAndSwap(c, v); c = committed[i].Load() {
		}
	}
	for i := range resources {
		write(i, 1)
	}

	src := &redis.Source{Meta: fastURL, Slow: slowURL}
	// Follow from the start: every version it yields is recorded.
	followCtx, stopFollow := context.WithCancel(ctx)
	var fmu sync.Mutex
	seen := map[string][]int64{}
	followed := make(chan error, 1)
	go func() {
		followed <- src.Follow(followCtx, redis.FollowOptions{Rescan: 50 * time.Millisecond}, func(r base.Record) error {
			if p, ok := r.Record.(*events.PurgeRecord); ok {
				t.Errorf("Follow yielded a purge of %s, which only moved", p.ResourceID)
			}
			mr, ok := r.Record.(*events.MetaRecord)
			if !ok {
				return nil
			}
			m, err := mr.Meta()
			if err != nil {
				return err
			}
			fmu.Lock()
			seen[m.ResourceID] = append(seen[m.ResourceID], m.TotalRevisionCount)
			fmu.Unlock()
			return nil
		})
	}()

	// The writer (newer versions) and the mover run together.
	moving, stopMoving := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // writer
		defer wg.Done()
		for v := int64(2); v <= versions; v++ {
			for i := range resources {
				if (i+int(v))%3 != 0 {
					write(i, v)
				}
			}
			time.Sleep(60 * time.Millisecond)
		}
	}()
	moverDone := make(chan error, 1)
	go func() { // mover: read, write slow, delete from Redis
		for moving.Err() == nil {
			for key, err := range fast.Scan(ctx, fast.Options().Pattern("")) {
				if err != nil {
					moverDone <- err
					return
				}
				model, id, _ := fast.ParseKey(key)
				raw, err := fast.Raw(ctx, model, id)
				if errors.Is(err, context.Canceled) {
					break
				}
				if err != nil {
					continue // moved by an earlier pass
				}
				m, err := redissink.DecodeMeta(raw)
				if err == nil {
					_, err = slow.ApplyMeta(ctx, model, m)
				}
				if err == nil {
					err = slow.Flush(ctx)
				}
				if err == nil {
					err = fast.Client().Eval(ctx, casDel, []string{key}, raw).Err()
				}
				if err != nil {
					moverDone <- err
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		moverDone <- nil
	}()

	// Snapshots while both run.
	writerDone := make(chan struct{})
	go func() { wg.Wait(); close(writerDone) }()
	snapshots := 0
	for done := false; !done || snapshots < 3; snapshots++ {
		select {
		case <-writerDone:
			done = true
		default:
		}
		var before [resources]int64
		for i := range resources {
			before[i] = committed[i].Load()
		}
		count := map[string]int{}
		for r, err := range src.Records(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			m, err := r.Record.(*events.MetaRecord).Meta()
			if err != nil {
				t.Fatal(err)
			}
			count[m.ResourceID]++
			var i int
			fmt.Sscanf(m.ResourceID, "issue:%d", &i)
			if m.TotalRevisionCount < before[i] {
				t.Errorf("snapshot %d: %s at version %d, but version %d was committed before the snapshot began", snapshots, m.ResourceID, m.TotalRevisionCount, before[i])
			}
		}
		for i := range resources {
			if count[rid(i)] != 1 {
				t.Errorf("snapshot %d: %s read %d times, want once", snapshots, rid(i), count[rid(i)])
			}
		}
		if t.Failed() {
			break
		}
	}
	// Let the mover empty Redis, then stop it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		for range fast.Scan(ctx, fast.Options().Pattern("")) {
			n++
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopMoving()
	if err := <-moverDone; err != nil {
		t.Fatal(err)
	}
	// Follow must reach every resource's last version; the deadline
	// restarts while resources are still being caught up with.
	lastMissing := -1
	for deadline := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		fmu.Lock()
		missing := 0
		for i := range resources {
			s := seen[rid(i)]
			if len(s) == 0 || s[len(s)-1] != committed[i].Load() {
				missing++
			}
		}
		fmu.Unlock()
		if missing == 0 {
			break
		}
		if missing != lastMissing {
			lastMissing, deadline = missing, time.Now().Add(waitfor.Scaled(10*time.Second))
		}
		if time.Now().After(deadline) {
			t.Fatalf("Follow has not yielded the last version of %d resources (no progress for %s)", missing, waitfor.Scaled(10*time.Second))
		}
	}
	stopFollow()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow: %v", err)
	}
	fmu.Lock()
	defer fmu.Unlock()
	for id, vs := range seen {
		for k := 1; k < len(vs); k++ {
			if vs[k] <= vs[k-1] {
				t.Errorf("Follow yielded %s at versions %v: not strictly increasing", id, vs)
				break
			}
		}
	}
	t.Logf("%d snapshots during the moves; Follow yielded %d resources", snapshots, len(seen))
}
