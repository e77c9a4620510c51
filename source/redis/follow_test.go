package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/waitfor"
	"github.com/specstar/replicator/source/internal/base"
	"github.com/specstar/replicator/source/redis"
)

// TestFollow: a meta written after Follow started is yielded within a
// second, by keyspace notification (the rescan is an hour away) or, with
// notifications off, by the rescan; an older meta written afterwards is
// never yielded; a deleted key yields a purge.
func TestFollow(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    redis.FollowOptions
	}{
		{"notifications", redis.FollowOptions{Rescan: time.Hour}},
		{"rescan only", redis.FollowOptions{Rescan: 50 * time.Millisecond, NoNotifications: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := redisURL(t, "")
			st := openRedis(t, u)
			if _, err := st.Put(ctx, "issue", meta(t, "a", 1)); err != nil {
				t.Fatal(err)
			}
			got := make(chan int64, 16) // a meta's version; -1 for a purge
			fctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- (&redis.Source{Meta: u}).Follow(fctx, tc.o, func(r base.Record) error {
					if p, ok := r.Record.(*events.PurgeRecord); ok {
						if p.ResourceID != "a" {
							t.Errorf("purge of %q, want a", p.ResourceID)
						}
						got <- -1
						return nil
					}
					m, err := r.Record.(*events.MetaRecord).Meta()
					if err == nil {
						got <- m.TotalRevisionCount
					}
					return err
				})
			}()
			expect := func(want int64) {
				t.Helper()
				select {
				case v := <-got:
					if v != want {
						t.Fatalf("yielded version %d, want %d", v, want)
					}
				case <-waitfor.After(10 * time.Second):
					t.Fatalf("version %d not yielded within %s", want, waitfor.Scaled(10*time.Second))
				}
			}
			expect(1) // the first scan
			// A key written directly, as SpecStar writes it.
			raw, err := meta(t, "a", 3).Encode(events.JSON)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Client().Set(ctx, st.Key("issue", "a"), raw, 0).Err(); err != nil {
				t.Fatal(err)
			}
			expect(3)
			raw, _ = meta(t, "a", 2).Encode(events.JSON) // older: a regression
			if err := st.Client().Set(ctx, st.Key("issue", "a"), raw, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Put(ctx, "issue", meta(t, "b", 1)); err != nil {
				t.Fatal(err)
			}
			expect(1) // b; a at version 2 was not yielded
			if err := st.Client().Del(ctx, st.Key("issue", "a")).Err(); err != nil {
				t.Fatal(err)
			}
			expect(-1) // a permanently deleted
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		})
	}
}
