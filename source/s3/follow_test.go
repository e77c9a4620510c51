package s3

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source/internal/base"
)

// TestFactoryFollow: following a factory yields all of it once, then, when
// another writer changes a meta.db, only the meta it made newer with that
// revision, and a purge for the meta it removed; an older meta written
// over a newer one is not yielded, and a pass with no change yields
// nothing.
func TestFactoryFollow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, raw := factoryURL(t)
	fill(t, raw, "small.acbak")
	want, _ := archiveRecords(t, "small.acbak")

	var (
		mu     sync.Mutex
		passes [][]base.Record
		cur    []base.Record
	)
	passDone := make(chan int, 100)
	done := make(chan error, 1)
	go func() {
		done <- (&Factory{URL: raw}).Follow(ctx, 20*time.Millisecond,
			func(r base.Record) error {
				mu.Lock()
				cur = append(cur, r)
				mu.Unlock()
				return nil
			},
			func() error {
				mu.Lock()
				passes = append(passes, cur)
				n := len(passes)
				cur = nil
				mu.Unlock()
				passDone <- n
				return nil
			})
	}()
	waitPass := func(after int) []base.Record {
		t.Helper()
		for {
			select {
			case n := <-passDone:
				if n > after {
					mu.Lock()
					defer mu.Unlock()
					return passes[n-1]
				}
			case err := <-done:
				t.Fatalf("follow ended: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("no pass within 30 s")
			}
		}
	}
	first := waitPass(0)
	got := map[string]bool{}
	for _, r := range first {
		got[recordKey(t, r)] = true
	}
	if len(got) != len(want) {
		t.Fatalf("the first pass yielded %d distinct records, the archive holds %d", len(got), len(want))
	}
	if quiet := waitPass(1); len(quiet) != 0 {
		t.Fatalf("a pass with no change yielded %d records", len(quiet))
	}

	// Another writer: a newer meta with a new revision for one issue, an
	// older meta for another (stale, not written), a purge of a third.
	_, frames := archiveRecords(t, "small.acbak")
	var (
		metas []*events.ResourceMeta
		revs  = map[string]*events.RawResource{}
	)
	for _, fr := range frames {
		switch r := fr.Record.(type) {
		case *events.MetaRecord:
			m, err := r.Meta()
			if err != nil {
				t.Fatal(err)
			}
			if m.ResourceID[:6] == "issue:" {
				metas = append(metas, m)
			}
		case *events.RevisionRecord:
			res, err := r.Resource()
			if err != nil {
				t.Fatal(err)
			}
			revs[res.Info.ResourceID] = res
		}
	}
	if len(metas) < 3 {
		t.Fatalf("small.acbak has %d issues, want 3", len(metas))
	}
	snk, err := sink.Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	newer := *metas[0]
	newer.UpdatedTime = events.Time{Time: newer.UpdatedTime.Instant().Add(time.Hour)}
	newer.TotalRevisionCount++
	newer.CurrentRevisionID = newer.ResourceID + ":99"
	rev := revs[newer.ResourceID]
	if rev == nil {
		t.Fatalf("no revision of %s in small.acbak", newer.ResourceID)
	}
	copied := *rev
	rev = &copied
	rev.Info.UID = "eeeeeeee-0000-4000-8000-000000000099"
	rev.Info.RevisionID = newer.CurrentRevisionID
	rev.Info.UpdatedTime = newer.UpdatedTime
	older := *metas[1]
	older.UpdatedTime = events.Time{Time: older.UpdatedTime.Instant().Add(-time.Hour)}
	if _, err := snk.ApplyRevision(ctx, "issue", rev); err != nil {
		t.Fatal(err)
	}
	if out, err := snk.ApplyMeta(ctx, "issue", &newer); err != nil || out != sink.Written {
		t.Fatalf("newer meta: %v %v", out, err)
	}
	if out, err := snk.ApplyMeta(ctx, "issue", &older); err != nil || out != sink.Stale {
		t.Fatalf("older meta: %v %v", out, err)
	}
	if _, err := snk.ApplyPurge(ctx, "issue", metas[2].ResourceID, events.Time{Time: time.Now().Add(24 * 365 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := snk.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var changed []base.Record
	for n := 2; len(changed) == 0; n++ {
		changed = waitPass(n)
	}
	var gotMeta, gotRev, gotPurge int
	for _, r := range changed {
		switch rec := r.Record.(type) {
		case *events.MetaRecord:
			m, _ := rec.Meta()
			if m.ResourceID != newer.ResourceID || m.TotalRevisionCount != newer.TotalRevisionCount {
				t.Errorf("a meta yielded that did not get newer: %s", m.ResourceID)
			}
			gotMeta++
		case *events.RevisionRecord:
			res, _ := rec.Resource()
			if res.Info.UID != rev.Info.UID {
				t.Errorf("a revision yielded again: %s", res.Info.RevisionID)
			}
			gotRev++
		case *events.PurgeRecord:
			if rec.ResourceID != metas[2].ResourceID {
				t.Errorf("purge of %s", rec.ResourceID)
			}
			gotPurge++
		default:
			t.Errorf("unexpected %T", rec)
		}
	}
	if gotMeta != 1 || gotRev != 1 || gotPurge != 1 {
		t.Errorf("after the change: %d metas, %d revisions, %d purges; want 1 each", gotMeta, gotRev, gotPurge)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("follow ended with %v, want the context's error", err)
	}
}

// TestFactoryFollowBlobAfterMeta: a writer that uploads a blob after the
// meta.db naming it (the replicator's factory sink writes a batch's
// blobs and metas in whatever batches they come) leaves no new ETag to
// notice; the follower looked for the blob once, yielded a reference to
// a missing blob and never looked again, so the tail never published it
// (a CI failure of TestTailS3Factory). Now the blob is yielded, with its
// bytes, at the first pass after it arrives.
func TestFactoryFollowBlobAfterMeta(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, raw := factoryURL(t)
	isBlob := func(r events.Record) bool { _, ok := r.(*events.BlobRecord); return ok }
	fillOnly(t, raw, "blobs.acbak", func(r events.Record) bool { return !isBlob(r) })
	want, frames := archiveRecords(t, "blobs.acbak")
	blobs := 0
	for _, fr := range frames {
		if isBlob(fr.Record) {
			blobs++
		}
	}
	if blobs == 0 {
		t.Fatal("blobs.acbak holds no blobs")
	}

	var (
		mu  sync.Mutex
		got = map[string]bool{}
	)
	passes := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() {
		done <- (&Factory{URL: raw}).Follow(ctx, 20*time.Millisecond,
			func(r base.Record) error {
				if _, ref := r.Record.(*events.BlobRefRecord); ref {
					return fmt.Errorf("yielded a reference to blob %s, not the blob", r.Record.(*events.BlobRefRecord).FileID)
				}
				mu.Lock()
				got[recordKey(t, r)] = true
				mu.Unlock()
				return nil
			},
			func() error { passes <- struct{}{}; return nil })
	}()
	wait := func(what string) {
		t.Helper()
		for drained := false; !drained; { // passes that ended before now do not count
			select {
			case <-passes:
			default:
				drained = true
			}
		}
		for range 2 { // a whole pass after the change
			select {
			case <-passes:
			case err := <-done:
				t.Fatalf("follow ended %s: %v", what, err)
			case <-time.After(30 * time.Second):
				t.Fatalf("no pass within 30 s %s", what)
			}
		}
	}
	wait("before the blobs")
	fillOnly(t, raw, "blobs.acbak", isBlob) // the blobs arrive; meta.db does not change
	wait("after the blobs")
	mu.Lock()
	defer mu.Unlock()
	for k := range want {
		if !got[k] {
			t.Errorf("a record of the factory was never yielded (%.60q)", k)
		}
	}
}
