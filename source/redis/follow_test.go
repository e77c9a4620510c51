package redis_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/redistest"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
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

// TestFollowRestoresKeyspaceEvents: Follow turns on the keyspace
// notifications it needs and, when it ends, puts the server's
// notify-keyspace-events back as it found it (issue 26, item 12: it was
// left changed); while a second Follow still subscribes the setting is
// left on for it, and the last to end that changed it restores it.
func TestFollowRestoresKeyspaceEvents(t *testing.T) {
	c := redistest.Client(t)
	orig, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ConfigSet(context.Background(), "notify-keyspace-events", orig["notify-keyspace-events"]) })
	get := func() string {
		t.Helper()
		v, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v["notify-keyspace-events"]
	}
	const start = "Ez" // some classes of someone else's, not the tail's
	if err := c.ConfigSet(ctx, "notify-keyspace-events", start).Err(); err != nil {
		t.Fatal(err)
	}
	start1 := get() // as the server spells it
	u := redisURL(t, "")
	st := openRedis(t, u)
	if _, err := st.Put(ctx, "issue", meta(t, "a", 1)); err != nil {
		t.Fatal(err)
	}
	// follow starts a Follow and returns when its first scan yielded a,
	// so its subscription is in place; stop ends it and waits.
	follow := func() (stop func()) {
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		first := make(chan struct{}, 1)
		go func() {
			done <- (&redis.Source{Meta: u}).Follow(fctx, redis.FollowOptions{Rescan: time.Hour}, func(r base.Record) error {
				select {
				case first <- struct{}{}:
				default:
				}
				return nil
			})
		}()
		select {
		case <-first:
		case err := <-done:
			t.Fatalf("Follow ended: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("Follow yielded nothing within 5 s")
		}
		return func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		}
	}
	stop1 := follow()
	on := get()
	if on == start1 || !strings.ContainsRune(on, 'K') || !strings.ContainsRune(on, 'z') {
		t.Fatalf("while following, notify-keyspace-events is %q (was %q); want the tail's classes added", on, start1)
	}
	stop2 := follow() // finds them on, changes nothing
	stop1()
	if got := get(); got != on {
		t.Errorf("the first Follow ended while a second follows: notify-keyspace-events %q, want %q left on", got, on)
	}
	stop2()
	if got := get(); got != on {
		t.Errorf("the second Follow, which changed nothing, set notify-keyspace-events to %q; want %q", got, on)
	}
	// One Follow alone that changed the setting puts it back.
	if err := c.ConfigSet(ctx, "notify-keyspace-events", start).Err(); err != nil {
		t.Fatal(err)
	}
	stop := follow()
	if get() == start1 {
		t.Fatal("Follow did not turn keyspace notifications on")
	}
	stop()
	if got := get(); got != start1 {
		t.Errorf("after Follow ended, notify-keyspace-events is %q; want %q as it was", got, start1)
	}
	// Changed by someone else meanwhile: left as they set it.
	stop = follow()
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "KA").Err(); err != nil {
		t.Fatal(err)
	}
	changed := get()
	stop()
	if got := get(); got != changed {
		t.Errorf("notify-keyspace-events changed meanwhile to %q, but Follow set it to %q at its end", changed, got)
	}
}

// TestBadKeysSkipped: a key in the store's key space that holds no meta
// (a hash another program wrote, bytes that do not decode) is skipped
// and reported, once, by the snapshot and by Follow (issue 26, item 5:
// writer snapshot exited 2 and a tail restarted forever); every other
// meta is read, and a change made later is still followed.
func TestBadKeysSkipped(t *testing.T) {
	u := redisURL(t, "")
	st := openRedis(t, u)
	c := st.Client()
	for _, rid := range []string{"a", "b"} {
		if _, err := st.Put(ctx, "issue", meta(t, rid, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.HSet(ctx, st.Key("issue", "hash"), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, st.Key("issue", "garbage"), "\xc1 not a meta", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var got []string
	for r, err := range (&redis.Source{Meta: u, Log: log}).Records(ctx) {
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if m, ok := r.Record.(*events.MetaRecord); ok {
			meta, err := m.Meta()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, meta.ResourceID)
		}
	}
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("snapshot yielded metas %v; want a, b", got)
	}
	for _, k := range []string{"hash", "garbage"} {
		if !strings.Contains(logs.String(), st.Key("issue", k)) {
			t.Errorf("the bad key %q is not reported:\n%s", st.Key("issue", k), logs.String())
		}
	}
	// Follow: the first scan yields a and b, rescans pass the bad keys
	// over, and c, written later, is yielded.
	var flogs syncBuffer
	yielded := make(chan string, 16)
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		o := redis.FollowOptions{Rescan: 20 * time.Millisecond, NoNotifications: true, Log: slog.New(slog.NewTextHandler(&flogs, nil))}
		done <- (&redis.Source{Meta: u}).Follow(fctx, o, func(r base.Record) error {
			switch rec := r.Record.(type) {
			case *events.MetaRecord:
				m, err := rec.Meta()
				if err != nil {
					return err
				}
				yielded <- m.ResourceID
			case *events.PurgeRecord:
				yielded <- "purge " + rec.ResourceID
			}
			return nil
		})
	}()
	want := []string{"a", "b", "c"}
	for i, w := range want {
		select {
		case id := <-yielded:
			if id != w {
				t.Fatalf("Follow yielded %q, want %q", id, w)
			}
		case err := <-done:
			t.Fatalf("Follow ended: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("Follow yielded %v of %v within 5 s", want[:i], want)
		}
		if w == "b" {
			if _, err := st.Put(ctx, "issue", meta(t, "c", 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow: %v", err)
	}
	if n := strings.Count(flogs.String(), "key="+st.Key("issue", "hash")); n != 1 {
		t.Errorf("the hash key reported %d times over the rescans; want once:\n%s", n, flogs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
