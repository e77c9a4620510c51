package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/redistest"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
	"github.com/specstar/replicator/sink/redis"
)

var ctx = context.Background()

// TestSpecStarBytes applies the metas of SpecStar's disk-layout archives
// and checks that each key holds exactly the bytes SpecStar's meta store
// serializer wrote for that meta: in json, its DiskMetaStore files (the
// RedisMetaStore stores the same serialized ResourceMeta); in msgpack,
// the archive's own MetaRecord bytes (msgspec's deterministic msgpack).
func TestSpecStarBytes(t *testing.T) {
	c := redistest.Client(t)
	for _, tc := range []struct {
		name string
		enc  events.Encoding
	}{{"factory-json", events.JSON}, {"factory-msgpack", events.JSON}, {"factory-json", events.Msgpack}} {
		t.Run(tc.name+"/"+tc.enc.String(), func(t *testing.T) {
			st := openStore(t, "", tc.enc)
			recs := sinktestutil.ReadArchiveFile(t, testfixtures.Path(t, "disk-layout", tc.name+".acbak"))
			n := 0
			for _, r := range recs {
				if r.Meta == nil {
					continue
				}
				if out, err := st.Put(ctx, r.Model, r.Meta); err != nil || out != sink.Written {
					t.Fatalf("apply %s: %v, %v", r.Meta.ResourceID, out, err)
				}
				want := r.Raw
				if tc.enc == events.JSON {
					want = testfixtures.Read(t, "disk-layout", tc.name, r.Model, "meta", r.Meta.ResourceID+".data")
				}
				key := strings.ReplaceAll(st.Options().Prefix, redis.ModelPlaceholder, r.Model) + "resource_meta:" + r.Meta.ResourceID
				got, err := c.Get(ctx, key).Bytes()
				if err != nil {
					t.Fatalf("GET %q: %v", key, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: key %q holds\n%q\nSpecStar wrote\n%q", tc.name, key, got, want)
				}
				n++
			}
			if n == 0 {
				t.Fatal("no metas in the archive")
			}
		})
	}
}

// TestReadsEitherEncoding: a store configured for msgpack still reads a
// meta SpecStar wrote in json (and the reverse), so a mirror of a store
// whose encoding was guessed wrong verifies instead of failing.
func TestReadsEitherEncoding(t *testing.T) {
	c := redistest.Client(t)
	st := openStore(t, "", events.Msgpack)
	dir := testfixtures.Path(t, "disk-layout", "factory-json", "issue", "meta")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := entries[0].Name()
	raw, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	rid := strings.TrimSuffix(name, ".data")
	key := strings.ReplaceAll(st.Options().Prefix, redis.ModelPlaceholder, "issue") + "resource_meta:" + rid
	if err := c.Set(ctx, key, raw, 0).Err(); err != nil {
		t.Fatal(err)
	}
	m, err := st.Meta(ctx, "issue", rid)
	if err != nil {
		t.Fatal(err)
	}
	if m.ResourceID != rid {
		t.Fatalf("read resource %q, want %q", m.ResourceID, rid)
	}
	// Replaying the same meta in the store's own encoding is newer by
	// nothing: the bytes differ, the meta is the same; the greater
	// encoding wins and the result is stable on a second replay.
	if _, err := st.Put(ctx, "issue", m); err != nil {
		t.Fatal(err)
	}
	if out, err := st.Put(ctx, "issue", m); err != nil || (out != sink.Unchanged && out != sink.Stale) {
		t.Fatalf("second replay: %v, %v; want no write", out, err)
	}
}

// TestConcurrentWriters races writers putting metas of one resource in
// opposite orders (each through its own connection, as two replicator
// processes flushing would), by Put (one write at a time) and by
// ApplyMeta and Flush (the pipelined batch): the newest meta must be
// what stays, every time.
func TestConcurrentWriters(t *testing.T) {
	for _, mode := range []string{"put", "flush"} {
		t.Run(mode, func(t *testing.T) { concurrentWriters(t, mode) })
	}
}

func concurrentWriters(t *testing.T, mode string) {
	prefix := redistest.Prefix(t) + redis.ModelPlaceholder + ":"
	const metas, writers, rounds = 20, 4, 10
	for round := range rounds {
		rid := fmt.Sprintf("race:%d", round)
		var all []*events.ResourceMeta
		for i := range metas {
			all = append(all, sinktestutil.Meta(t, rid, fmt.Sprintf("2024-05-01T00:00:%02dZ", i), int64(i+1), "w"))
		}
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			st := openStore(t, prefix, events.JSON)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range metas {
					m := all[i]
					if w%2 == 1 {
						m = all[metas-1-i] // newest first
					}
					var err error
					if mode == "put" {
						_, err = st.Put(ctx, "issue", m)
					} else if _, err = st.ApplyMeta(ctx, "issue", m); err == nil && (w < 2 || i%3 == 2 || i == metas-1) {
						// Writers 0 and 1 flush each meta (the pipelined
						// path), 2 and 3 three of one key at a time (one
						// write at a time).
						err = st.Flush(ctx)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, err := openStore(t, prefix, events.JSON).Meta(ctx, "issue", rid)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sinktestutil.Enc(t, got), sinktestutil.Enc(t, all[metas-1])) {
			t.Fatalf("round %d: the store kept the meta updated at %s, want the newest (%s)", round, got.UpdatedTime, all[metas-1].UpdatedTime)
		}
	}
}

// TestPurgeRace races a purge against a re-creation that is newer than
// the purge: whichever runs first, the re-created meta must stay.
func TestPurgeRace(t *testing.T) {
	prefix := redistest.Prefix(t) + redis.ModelPlaceholder + ":"
	for round := range 20 {
		rid := fmt.Sprintf("p:%d", round)
		a, b := openStore(t, prefix, events.JSON), openStore(t, prefix, events.JSON)
		if _, err := a.Put(ctx, "issue", sinktestutil.Meta(t, rid, "2024-05-01T00:00:00Z", 1, "a")); err != nil {
			t.Fatal(err)
		}
		newer := sinktestutil.Meta(t, rid, "2024-07-01T00:00:00Z", 2, "a")
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			a.Purge(ctx, "issue", rid, sinktestutil.MustTime(t, "2024-06-01T00:00:00Z"))
		}()
		go func() { defer wg.Done(); b.Put(ctx, "issue", newer) }()
		wg.Wait()
		got, err := a.Meta(ctx, "issue", rid)
		if err != nil {
			t.Fatalf("round %d: the re-created meta is gone: %v", round, err)
		}
		if got.TotalRevisionCount != 2 {
			t.Fatalf("round %d: kept %d revisions' meta, want the re-created one", round, got.TotalRevisionCount)
		}
	}
}

// TestKeyLayout checks the keys SpecStar's RedisMetaStore reads, for the
// default and custom prefixes, and that a fixed prefix holds one model.
func TestKeyLayout(t *testing.T) {
	c := redistest.Client(t)
	base := redistest.Prefix(t)
	m := sinktestutil.Meta(t, "issue:1", "2024-05-01T00:00:00Z", 1, "a")
	for _, tc := range []struct {
		url     string
		model   string
		wantKey string
		wantErr string
	}{
		{"prefix=" + base + "{model}:", "issue", base + "issue:resource_meta:issue:1", ""},
		{"prefix=" + base + "app/{model}/", "issue", base + "app/issue/resource_meta:issue:1", ""},
		{"prefix=" + base + "one:&models=issue", "issue", base + "one:resource_meta:issue:1", ""},
		{"prefix=" + base + "one:&models=issue", "user", "", "holds model"},
		{"prefix=" + base + "{model}:", "x:resource_meta:y", "", "ambiguous"},
		{"prefix=" + base + "{model}:", "../x", "", "contains"},
	} {
		spec, err := redis.ParseSpec(redistest.SinkURL(tc.url))
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		st, err := spec.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		out, err := st.Put(ctx, tc.model, m)
		if tc.wantErr != "" {
			if !sink.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s model %q: %v, %v; want an Invalid error with %q", tc.url, tc.model, out, err, tc.wantErr)
			}
			continue
		}
		if err != nil || out != sink.Written {
			t.Fatalf("%s: %v, %v", tc.url, out, err)
		}
		if n, err := c.Exists(ctx, tc.wantKey).Result(); err != nil || n != 1 {
			t.Errorf("%s: key %q not written (%v)", tc.url, tc.wantKey, err)
		}
		if k := st.Key(tc.model, m.ResourceID); k != tc.wantKey {
			t.Errorf("%s: Key = %q, want %q", tc.url, k, tc.wantKey)
		}
		if model, rid, ok := st.ParseKey(tc.wantKey); !ok || model != tc.model || rid != m.ResourceID {
			t.Errorf("%s: ParseKey(%q) = %q, %q, %v", tc.url, tc.wantKey, model, rid, ok)
		}
		ids := []string{}
		for id, err := range st.ResourceIDs(ctx, tc.model) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if len(ids) != 1 || ids[0] != m.ResourceID {
			t.Errorf("%s: ResourceIDs = %q", tc.url, ids)
		}
	}
}

// TestGlobCharacters: models and ids holding SCAN pattern characters are
// listed as themselves, never matching one another's keys.
func TestGlobCharacters(t *testing.T) {
	st := openStore(t, "", events.JSON)
	models := []string{"a*", "a?", "a[b]", `a\`, "a"}
	for _, model := range models {
		for _, rid := range []string{"*", "?", "[x]", `\`, "plain"} {
			if _, err := st.Put(ctx, model, sinktestutil.Meta(t, rid, "2024-05-01T00:00:00Z", 1, "a")); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := st.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{"a", "a*", "a?", "a[b]", `a\`}) {
		t.Errorf("Models = %q", got)
	}
	for _, model := range models {
		var ids []string
		for id, err := range st.ResourceIDs(ctx, model) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if fmt.Sprint(ids) != fmt.Sprint([]string{"*", "?", "[x]", `\`, "plain"}) {
			t.Errorf("model %q: ResourceIDs = %q", model, ids)
		}
	}
}

// TestParseSpec covers the URL's options and its refusals.
func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		prefix  string
		enc     events.Encoding
		addr    string
		db      int
		wantErr string
	}{
		{raw: "redis://127.0.0.1:6379/0", prefix: "{model}:", enc: events.JSON, addr: "127.0.0.1:6379"},
		{raw: "redis://:secret@h:7000/3?prefix=app:{model}:&encoding=msgpack", prefix: "app:{model}:", enc: events.Msgpack, addr: "h:7000", db: 3},
		{raw: "redis://h/2?prefix=x:&models=issue", prefix: "x:", enc: events.JSON, addr: "h:6379", db: 2},
		{raw: "redis://h/0?prefix=x:", wantErr: "models="},
		{raw: "redis://h/0?encoding=yaml", wantErr: "yaml"},
		{raw: "redis://h/0?on_duplicate=skip", wantErr: "newer"},
		{raw: "redis://h/0?bogus=1", wantErr: "bogus"},
		{raw: "http://h/0", wantErr: "scheme"},
		{raw: "redis://h/notadb", wantErr: "notadb"},
	} {
		s, err := redis.ParseSpec(tc.raw)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want an error with %q", tc.raw, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error shows the password: %v", tc.raw, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.raw, err)
			continue
		}
		if s.Options.Prefix != tc.prefix || s.Options.Encoding != tc.enc || s.Client.Addr != tc.addr || s.Client.DB != tc.db {
			t.Errorf("%s: prefix %q enc %v addr %s db %d", tc.raw, s.Options.Prefix, s.Options.Encoding, s.Client.Addr, s.Client.DB)
		}
		if rev, blobs := s.Holds(); rev || blobs {
			t.Errorf("%s: holds revisions %v blobs %v, want metas only", tc.raw, rev, blobs)
		}
	}
	a, _ := redis.ParseSpec("redis://:one@h:1/0")
	b, _ := redis.ParseSpec("redis://:two@h:1/0")
	c, _ := redis.ParseSpec("redis://h:1/1")
	if a.Name != b.Name || a.Name == c.Name {
		t.Errorf("consumer names %q %q %q: want one per server and database, whatever the password", a.Name, b.Name, c.Name)
	}
}

// TestUnreachable: a server that does not answer is a clear error at
// Open, naming the server, not a hang or a panic.
func TestUnreachable(t *testing.T) {
	spec, err := redis.ParseSpec("redis://127.0.0.1:1/0?dial_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	_, err = spec.Open(ctx)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("open an unreachable server: %v", err)
	}
}

// TestQueuedUntilFlush: an applied meta reaches Redis at Flush, not
// before, so a deployment's meta never precedes its revisions there; a
// purge is queued in order with it.
func TestQueuedUntilFlush(t *testing.T) {
	st := openStore(t, "", events.JSON)
	m := sinktestutil.Meta(t, "q", "2024-05-01T00:00:00Z", 1, "a")
	if out, err := st.ApplyMeta(ctx, "issue", m); err != nil || out != sink.Written {
		t.Fatalf("apply: %v, %v", out, err)
	}
	if _, err := st.Meta(ctx, "issue", "q"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("before Flush the meta is readable: %v", err)
	}
	if err := st.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Meta(ctx, "issue", "q"); err != nil {
		t.Fatalf("after Flush: %v", err)
	}
	if _, err := st.ApplyPurge(ctx, "issue", "q", sinktestutil.MustTime(t, "2024-06-01T00:00:00Z")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, "q", "2024-07-01T00:00:00Z", 2, "a")); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Meta(ctx, "issue", "q"); err != nil || got.TotalRevisionCount != 2 {
		t.Fatalf("purge then re-creation, flushed together: %v, %v", got, err)
	}
}

// TestMissing: absent metas, revisions and blobs wrap fs.ErrNotExist.
func TestMissing(t *testing.T) {
	st := openStore(t, "", events.JSON)
	if _, err := st.Meta(ctx, "issue", "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Meta: %v", err)
	}
	if _, _, err := st.Revision(ctx, "issue", "nope", "nope:1", events.Opt[string]{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Revision: %v", err)
	}
}

// FuzzParseKey: any key either parses into a model and id whose key is
// the same key, or is refused; never a panic.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"issue:resource_meta:x", "a:b:resource_meta:c", "resource_meta:", ":resource_meta:", "p:x:resource_meta:y"} {
		f.Add(s, "p:{model}:")
		f.Add(s, "{model}:")
	}
	f.Fuzz(func(t *testing.T, key, prefix string) {
		if !strings.Contains(prefix, redis.ModelPlaceholder) {
			return
		}
		st := redis.Options{Prefix: prefix}
		model, rid, ok := st.ParseKey(key)
		if ok && st.Key(model, rid) != key {
			t.Fatalf("ParseKey(%q) = %q, %q; Key gives %q", key, model, rid, st.Key(model, rid))
		}
	})
}

// FuzzParseSpec: any URL either parses or is refused with an error that
// does not show its password; never a panic.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/0", "redis://:pw@h/1?prefix={model}:&encoding=msgpack",
		"rediss://u:pw@h:1/2?models=a&prefix=x:", "redis://h/0?slow=postgres://x", "redis://:Sekr1t@h/0?encoding=yaml", "redis://[::1]:6379/0", "redis://h/99999999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := redis.ParseSpec(raw)
		if err == nil && (s.Client == nil || s.Name == "") {
			t.Fatalf("%q parsed without a client or consumer name", raw)
		}
		if err != nil && strings.Contains(raw, ":Sekr1t@") && strings.Contains(err.Error(), "Sekr1t") {
			t.Fatalf("%q: error shows the password: %v", raw, err)
		}
	})
}

// TestAmbiguousModelRefused: with the prefix "{model}:", model "a" with
// resource "resource_meta:x" and model "a:resource_meta" with resource
// "x" would share one key (issue 26, item 4). SpecStar's layout cannot
// tell them apart, so the model whose keys read back as another's is
// refused (dead-lettered), and the other keeps its key to itself.
func TestAmbiguousModelRefused(t *testing.T) {
	c := redistest.Client(t)
	base := redistest.Prefix(t)
	for _, tc := range []struct{ prefix, model, rid, owner string }{
		{"{model}:", "a:resource_meta", "x", "a"},
		{"{model}:", "a:resource_meta:b", "x", "a"},
		{"app-{model}-", "a-resource_meta:", "x", "a"},
		{"{model}", "aresource_meta:", "x", "a"},
	} {
		spec, err := redis.ParseSpec(redistest.SinkURL("prefix=" + base + tc.prefix))
		if err != nil {
			t.Fatal(err)
		}
		st, err := spec.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		bad := sinktestutil.Meta(t, tc.rid, "2024-05-01T00:00:00Z", 1, "a")
		out, err := st.ApplyMeta(ctx, tc.model, bad)
		if !sink.IsInvalid(err) || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.owner)) {
			t.Errorf("prefix %q model %q: %v, %v; want an Invalid error naming model %q", tc.prefix, tc.model, out, err, tc.owner)
		}
		if _, err := st.ApplyPurge(ctx, tc.model, tc.rid, events.Time{}); !sink.IsInvalid(err) {
			t.Errorf("prefix %q purge of model %q: %v; want an Invalid error", tc.prefix, tc.model, err)
		}
		// The owner's resource whose key the refused model would have
		// taken is written and read back as the owner's.
		rid := strings.TrimPrefix(st.Key(tc.model, tc.rid), st.Key(tc.owner, ""))
		good := sinktestutil.Meta(t, rid, "2024-05-01T00:00:00Z", 1, "a")
		if out, err := st.Put(ctx, tc.owner, good); err != nil || out != sink.Written {
			t.Fatalf("prefix %q model %q resource %q: %v, %v", tc.prefix, tc.owner, rid, out, err)
		}
		key := st.Key(tc.owner, rid)
		if m, r, ok := st.ParseKey(key); !ok || m != tc.owner || r != rid {
			t.Errorf("key %q reads back as %q, %q, %v; want %q, %q", key, m, r, ok, tc.owner, rid)
		}
		if n, err := c.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Errorf("key %q: exists %d, %v", key, n, err)
		}
	}
	// Models that merely contain the infix elsewhere keep working.
	st := openStore(t, "", events.JSON)
	for _, model := range []string{"resource_meta", "a_resource_meta", "resource_meta:a"} {
		m := sinktestutil.Meta(t, "x", "2024-05-01T00:00:00Z", 1, "a")
		if out, err := st.Put(ctx, model, m); err != nil || out != sink.Written {
			t.Errorf("model %q: %v, %v", model, out, err)
		}
	}
}

// TestForeignKeyRefused: a key of another type where a meta would go (a
// hash another program wrote) refuses that meta for good (issue 26, item
// 5: WRONGTYPE was retried forever): Put and Purge say Invalid, and a
// Flush holding it writes nothing more of its batch, drops it and says
// so (sink.DroppedError), so the caller can write the batch again one
// record at a time; the hash is left alone.
func TestForeignKeyRefused(t *testing.T) {
	c := redistest.Client(t)
	st := openStore(t, "", events.JSON)
	foreign := st.Key("issue", "taken")
	if err := c.HSet(ctx, foreign, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	m := sinktestutil.Meta(t, "taken", "2024-05-01T00:00:00Z", 1, "a")
	if _, err := st.Put(ctx, "issue", m); !sink.IsInvalid(err) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Put at a hash: %v; want an Invalid error saying WRONGTYPE", err)
	}
	if _, err := st.Purge(ctx, "issue", "taken", events.Time{}); !sink.IsInvalid(err) {
		t.Errorf("Purge of a hash: %v; want an Invalid error", err)
	}
	if _, err := st.Meta(ctx, "issue", "taken"); !sink.IsInvalid(err) {
		t.Errorf("Meta of a hash: %v; want an Invalid error", err)
	}
	for _, twice := range []bool{false, true} { // the batch path, and the one-at-a-time path
		if _, err := st.ApplyMeta(ctx, "issue", sinktestutil.Meta(t, "other", "2024-05-01T00:00:00Z", 1, "a")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ApplyMeta(ctx, "issue", m); err != nil {
			t.Fatal(err)
		}
		if twice {
			if _, err := st.ApplyMeta(ctx, "issue", m); err != nil {
				t.Fatal(err)
			}
		}
		err := st.Flush(ctx)
		if !sink.IsDropped(err) || !sink.IsInvalid(err) {
			t.Fatalf("Flush with a meta at a hash (twice %v): %v; want a DroppedError", twice, err)
		}
		if err := st.Flush(ctx); err != nil {
			t.Fatalf("Flush after the batch was dropped: %v", err)
		}
	}
	if typ, err := c.Type(ctx, foreign).Result(); err != nil || typ != "hash" {
		t.Errorf("the foreign key is now a %q (%v); want the hash left alone", typ, err)
	}
}
