// Package redis is the sink of SpecStar's Redis meta store: one string key
// per resource, {prefix}resource_meta:{resource_id}, holding the encoded
// ResourceMeta (json by default, msgpack if configured), byte-identical to
// what SpecStar writes there. It holds metas only (revisions and blobs
// are Skipped), so it is the meta layer of a deployment whose resources
// and blobs live on disk, in S3 or in Postgres.
//
// Newer-meta-wins is made atomic in Redis: the newer meta is decided in Go
// by the rule every meta store shares (updated time, then revision count,
// then encoded bytes), and written by a Lua compare-and-set that replaces
// the key only if it still holds the bytes that decision was made
// against; a lost race is decided again, so two writers never lose an
// update. Apply validates and queues; Flush writes, so in a deployment
// (whose layered sink flushes blobs, then revisions, then metas) a meta
// never reaches Redis before the revisions it points at, as SpecStar
// orders its own writes, and a follower of the keys never sees a meta
// whose revisions are not written yet.
package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/lease"
	"github.com/specstar/replicator/sink/internal/store"
)

// ModelPlaceholder in a prefix is replaced by the model's name, so one
// server (and database) holds the metas of every model.
const ModelPlaceholder = "{model}"

// DefaultPrefix is the key prefix when the URL gives none: one key space
// per model, "{model}:resource_meta:{resource_id}".
const DefaultPrefix = ModelPlaceholder + ":"

// KeyInfix separates the prefix from the resource id in every key, as in
// SpecStar's RedisMetaStore.
const KeyInfix = "resource_meta:"

// maxCASAttempts bounds how often a write is decided again after another
// writer changed the key in between; each lost race means another writer
// made progress, so this is only reached under a pathological storm.
const maxCASAttempts = 100

// scanCount is the COUNT hint of each SCAN call.
const scanCount = 1000

// Options are a Redis meta store's key layout and encoding.
type Options struct {
	// Prefix starts every key; ModelPlaceholder in it is replaced by the
	// model. Without the placeholder the store holds Model only.
	Prefix string
	// Model is the one model a Prefix without ModelPlaceholder holds.
	Model string
	// Encoding is how metas are written (JSON, SpecStar's default, or
	// Msgpack); reads accept both.
	Encoding events.Encoding

	// leaseTTL is how long a lease outlives its last renewal (0:
	// lease.DefaultTTL); tests shorten it.
	leaseTTL time.Duration
}

// casScript replaces (or deletes) KEYS[1] only if it still holds what the
// caller decided against: ARGV[1] "1" if a value was read (ARGV[2]), "0"
// if the key was absent; ARGV[3] "set" (to ARGV[4]) or "del". It returns 1
// when it changed the key, 0 when the key had changed meanwhile.
var casScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if cur ~= ARGV[2] then return 0 end
elseif cur then
  return 0
end
if ARGV[3] == 'set' then
  redis.call('SET', KEYS[1], ARGV[4])
else
  redis.call('DEL', KEYS[1])
end
return 1
`)

// Sink writes SpecStar metas to a Redis meta store. It is safe for
// concurrent use, and with other writers of the same keys.
type Sink struct {
	rdb  *goredis.Client
	opts Options
	addr string // server and database, for messages

	lease *lease.Keeper // this process's lease, while it writes or restores

	mu    sync.Mutex
	queue []write // applied, not yet flushed, in Apply order
}

// write is one queued meta or purge.
type write struct {
	model, rid string
	meta       *events.ResourceMeta // nil: a purge
	encoded    []byte
	purgedAt   events.Time
}

// Open connects to the server opts names and checks it answers.
func Open(ctx context.Context, client *goredis.Options, opts Options) (*Sink, error) {
	switch opts.Encoding {
	case events.JSON, events.Msgpack:
	default:
		return nil, fmt.Errorf("sink: unknown encoding %v", opts.Encoding)
	}
	if !strings.Contains(opts.Prefix, ModelPlaceholder) && opts.Model == "" {
		return nil, fmt.Errorf("sink: redis prefix %q has no %s and no model is named", opts.Prefix, ModelPlaceholder)
	}
	rdb := goredis.NewClient(client)
	s := &Sink{rdb: rdb, opts: opts, addr: fmt.Sprintf("redis %s/%d", client.Addr, client.DB)}
	s.lease = lease.New(leaseStore{s}, s.String(), opts.leaseTTL, nil)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("%s: %w", s.addr, err)
	}
	return s, nil
}

// Client is the connection, for readers that follow the store's changes
// (the Redis source's keyspace notifications).
func (s *Sink) Client() *goredis.Client { return s.rdb }

// Options are the store's key layout and encoding.
func (s *Sink) Options() Options { return s.opts }

// String names the store in messages: server, database and prefix.
func (s *Sink) String() string { return s.addr + " prefix " + fmt.Sprintf("%q", s.opts.Prefix) }

// checkModel refuses a model the store cannot hold: empty, NUL, one that
// would make keys ambiguous, or another model than a fixed prefix's.
func (s *Sink) checkModel(model string) error {
	if err := store.CheckModel(model); err != nil {
		return err // the names no other store holds either, so a mirror can take any model
	}
	key := fmt.Sprintf("model %q", model)
	switch {
	case !strings.Contains(s.opts.Prefix, ModelPlaceholder) && model != s.opts.Model:
		return store.Invalidf(key, "this store's prefix %q holds model %q only", s.opts.Prefix, s.opts.Model)
	}
	if other, ok := s.opts.sharesKeys(model); ok {
		return store.Invalidf(key, "its keys are ambiguous: %q is also the start of keys of model %q, and SpecStar's layout {prefix}resource_meta:{resource_id} cannot tell them apart", s.opts.modelPrefix(model), other)
	}
	return nil
}

// sharesKeys reports whether model's keys can also be read as another
// model's (returned), as with the prefix "{model}:" the key of model
// "a:resource_meta", resource "x", is that of model "a", resource
// "resource_meta:x". A key is read back at the first separator (what
// follows the placeholder, then KeyInfix), so model's keys are its own
// exactly when that first separator is the one after model: refusing
// every other model makes the mapping one to one.
func (o Options) sharesKeys(model string) (string, bool) {
	_, after, ok := strings.Cut(o.Prefix, ModelPlaceholder)
	if !ok {
		return "", false // one model only
	}
	sep := after + KeyInfix
	if i := strings.Index(model+sep, sep); i < len(model) {
		return model[:i], true
	}
	return "", false
}

// checkResourceID refuses a resource id no key can hold unambiguously.
func checkResourceID(id string) error {
	key := fmt.Sprintf("resource_id %q", id)
	switch {
	case id == "":
		return store.Invalid(key, "empty")
	case strings.IndexByte(id, 0) >= 0:
		return store.Invalid(key, "contains NUL")
	}
	return nil
}

// modelPrefix is the prefix of model's keys, up to and with KeyInfix.
func (o Options) modelPrefix(model string) string {
	return strings.ReplaceAll(o.Prefix, ModelPlaceholder, model) + KeyInfix
}

// Key is the key of one resource's meta.
func (o Options) Key(model, resourceID string) string { return o.modelPrefix(model) + resourceID }

// ParseKey reads a key of this layout back into its model and resource
// id; ok is false for a key of another layout.
func (o Options) ParseKey(key string) (model, resourceID string, ok bool) {
	before, after, hasModel := strings.Cut(o.Prefix, ModelPlaceholder)
	if !hasModel {
		rid, ok := strings.CutPrefix(key, o.Prefix+KeyInfix)
		return o.Model, rid, ok && rid != ""
	}
	rest, ok := strings.CutPrefix(key, before)
	if !ok {
		return "", "", false
	}
	model, rid, ok := strings.Cut(rest, after+KeyInfix)
	if !ok || model == "" || rid == "" {
		return "", "", false
	}
	return model, rid, true
}

// Pattern is the SCAN MATCH pattern of every meta key of the layout (or
// of one model's, when model is not "").
func (o Options) Pattern(model string) string {
	if model != "" {
		return globEscape(o.modelPrefix(model)) + "*"
	}
	before, after, hasModel := strings.Cut(o.Prefix, ModelPlaceholder)
	if !hasModel {
		return globEscape(o.Prefix+KeyInfix) + "*"
	}
	return globEscape(before) + "*" + globEscape(after+KeyInfix) + "*"
}

// Key is the key of one resource's meta.
func (s *Sink) Key(model, resourceID string) string { return s.opts.Key(model, resourceID) }

// ParseKey reads a key of this store back into its model and resource
// id; ok is false for a key of another layout.
func (s *Sink) ParseKey(key string) (model, resourceID string, ok bool) { return s.opts.ParseKey(key) }

// globEscape quotes the characters SCAN MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Raw reads the stored bytes of one meta; a missing key wraps
// fs.ErrNotExist.
func (s *Sink) Raw(ctx context.Context, model, resourceID string) ([]byte, error) {
	key := s.Key(model, resourceID)
	b, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("%s: meta %q: %w", s.addr, key, fs.ErrNotExist)
	}
	if isWrongType(err) {
		return nil, fmt.Errorf("%s: %w", s.addr, foreignKey(key))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: get %q: %w", s.addr, key, err)
	}
	return b, nil
}

// isWrongType reports whether err is the server's refusal of a string
// command on a key of another type (a hash, a list...).
func isWrongType(err error) bool {
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}

// foreignKey is the permanent refusal of a key that holds something
// else than a string, so no meta: one written by another program, which
// the store must not overwrite and retrying will not change.
func foreignKey(key string) error {
	return store.Invalid(fmt.Sprintf("meta key %q", key), "holds a value of another type than a string (WRONGTYPE): a foreign key, left alone")
}

// DecodeMeta reads a stored meta in either encoding (SpecStar's json
// starts with '{', a msgpack map never does), so a store written in the
// other encoding than configured is still read.
func DecodeMeta(b []byte) (*events.ResourceMeta, error) {
	enc := events.Msgpack
	if len(b) > 0 && b[0] == '{' {
		enc = events.JSON
	}
	return events.DecodeResourceMeta(enc, b)
}

// ApplyMeta validates and encodes one resource's ResourceMeta and queues
// it for the next Flush, returning Written ("queued"): Flush decides
// whether it replaces the stored one (see Put). Refusals come at once.
func (s *Sink) ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error) {
	encoded, err := s.prepare(model, meta)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, write{model: model, rid: meta.ResourceID, meta: meta, encoded: encoded})
	return store.Written, ctx.Err()
}

// prepare checks a meta and encodes it in the store's encoding.
func (s *Sink) prepare(model string, meta *events.ResourceMeta) ([]byte, error) {
	if meta == nil {
		return nil, store.Invalid("meta", "nil")
	}
	if err := s.checkModel(model); err != nil {
		return nil, err
	}
	if err := checkResourceID(meta.ResourceID); err != nil {
		return nil, err
	}
	encoded, err := meta.Encode(s.opts.Encoding)
	if err != nil {
		return nil, store.Invalidf(fmt.Sprintf("meta %q", meta.ResourceID), "cannot be encoded in %v: %v", s.opts.Encoding, err)
	}
	return encoded, nil
}

// Put writes one resource's ResourceMeta now, unless the store holds the
// same one (Unchanged) or a newer one (Stale): newer is a later
// updated_time (naive read as UTC), then a higher total_revision_count,
// then, between two different metas tying on both, the greater encoding,
// so the result never depends on arrival order. A stored value that does
// not decode is replaced. The write is a compare-and-set: if another
// writer changed the key after it was read, the decision is taken again.
func (s *Sink) Put(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error) {
	encoded, err := s.prepare(model, meta)
	if err != nil {
		return 0, err
	}
	if err := s.lease.Writing(ctx); err != nil {
		return 0, err
	}
	return s.put(ctx, model, meta, encoded)
}

func (s *Sink) put(ctx context.Context, model string, meta *events.ResourceMeta, encoded []byte) (store.Outcome, error) {
	key := s.Key(model, meta.ResourceID)
	for range maxCASAttempts {
		cur, err := s.Raw(ctx, model, meta.ResourceID)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		if out := decidePut(meta, encoded, cur); out != store.Written {
			return out, nil
		}
		done, err := s.cas(ctx, key, cur, "set", encoded)
		if err != nil {
			return 0, err
		}
		if done {
			return store.Written, nil
		}
	}
	return 0, fmt.Errorf("%s: meta %q: changed by other writers %d times in a row", s.addr, key, maxCASAttempts)
}

// decidePut says whether meta (encoded) replaces cur (nil: absent):
// Written if it does, else Unchanged or Stale.
func decidePut(meta *events.ResourceMeta, encoded, cur []byte) store.Outcome {
	if cur == nil {
		return store.Written
	}
	if bytes.Equal(cur, encoded) {
		return store.Unchanged
	}
	if old, err := DecodeMeta(cur); err == nil && CompareMeta(meta, encoded, old, cur) <= 0 {
		return store.Stale
	}
	return store.Written // newer, or cur is broken
}

// decidePurge says whether a purge at purgedAt deletes cur (nil:
// absent): Written if it does, Unchanged if there is nothing, Stale if
// cur was updated after the purge.
func decidePurge(cur []byte, purgedAt events.Time) store.Outcome {
	if cur == nil {
		return store.Unchanged
	}
	if old, err := DecodeMeta(cur); err == nil && old.UpdatedTime.Instant().After(purgedAt.Instant()) {
		return store.Stale
	}
	return store.Written
}

// cas runs casScript: op ("set" to value, or "del") on key if it still
// holds expected (nil: absent).
func (s *Sink) cas(ctx context.Context, key string, expected []byte, op string, value []byte) (bool, error) {
	present := "0"
	if expected != nil {
		present = "1"
	}
	n, err := casScript.Run(ctx, s.rdb, []string{key}, present, expected, op, value).Int()
	if err != nil {
		return false, fmt.Errorf("%s: %s %q: %w", s.addr, op, key, err)
	}
	return n == 1, nil
}

// CompareMeta orders two metas of one resource (a encoded as ab, b as
// bb): by updated time (naive read as UTC), then total revision count,
// then encoded bytes, the rule every meta store of this repository keeps.
func CompareMeta(a *events.ResourceMeta, ab []byte, b *events.ResourceMeta, bb []byte) int {
	if c := a.UpdatedTime.Instant().Compare(b.UpdatedTime.Instant()); c != 0 {
		return c
	}
	if a.TotalRevisionCount != b.TotalRevisionCount {
		if a.TotalRevisionCount > b.TotalRevisionCount {
			return 1
		}
		return -1
	}
	return bytes.Compare(ab, bb)
}

// ApplyRevision is Skipped: a Redis meta store holds no revisions.
func (s *Sink) ApplyRevision(ctx context.Context, model string, res *events.RawResource) (store.Outcome, error) {
	return store.Skipped, nil
}

// ApplyBlob is Skipped: a Redis meta store holds no blobs.
func (s *Sink) ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (store.Outcome, error) {
	return store.Skipped, nil
}

// ApplyPurge validates a permanent delete and queues it for the next
// Flush, in order with the queued metas, returning Written ("queued"):
// Flush deletes the key as Purge does.
func (s *Sink) ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	if err := s.checkModel(model); err != nil {
		return 0, err
	}
	if err := checkResourceID(resourceID); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, write{model: model, rid: resourceID, purgedAt: purgedAt})
	return store.Written, ctx.Err()
}

// Purge deletes the resource's meta key now, unless the stored meta was
// updated after purgedAt (a re-creation: Stale); Unchanged when there is
// none. The delete is a compare-and-set like Put's write.
func (s *Sink) Purge(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	if err := s.checkModel(model); err != nil {
		return 0, err
	}
	if err := checkResourceID(resourceID); err != nil {
		return 0, err
	}
	if err := s.lease.Writing(ctx); err != nil {
		return 0, err
	}
	key := s.Key(model, resourceID)
	for range maxCASAttempts {
		cur, err := s.Raw(ctx, model, resourceID)
		if errors.Is(err, fs.ErrNotExist) {
			return store.Unchanged, nil
		}
		if err != nil {
			return 0, err
		}
		if out := decidePurge(cur, purgedAt); out != store.Written {
			return out, nil
		}
		done, err := s.cas(ctx, key, cur, "del", nil)
		if err != nil {
			return 0, err
		}
		if done {
			return store.Written, nil
		}
	}
	return 0, fmt.Errorf("%s: purge %q: changed by other writers %d times in a row", s.addr, key, maxCASAttempts)
}

// Flush writes the queued metas and purges in Apply order (each as Put or
// Purge does); when it returns they are in Redis, as durable as the
// server's persistence settings make them. On an error the whole batch
// stays queued for the next Flush (writing it again changes nothing that
// was written), except on a key that refuses a meta for good (one of
// another type than a string): then the batch is dropped and the error
// is a sink.DroppedError. Keys written once in the batch, the common case, cost one
// MGET and one pipeline of compare-and-sets per chunk; a key written
// several times, or whose compare-and-set lost a race, is written one
// write at a time.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	pending := len(s.queue) > 0
	s.mu.Unlock()
	if pending {
		if err := s.lease.Writing(ctx); err != nil {
			return err // the batch stays queued
		}
	}
	s.mu.Lock()
	queue := s.queue
	s.queue = nil
	s.mu.Unlock()
	if err := s.flush(ctx, queue); err != nil {
		if store.IsInvalid(err) {
			// A key that refuses a meta for good (a foreign one): the
			// batch is dropped, for the caller to apply again one
			// record at a time and dead-letter the refused one.
			return &store.DroppedError{Err: err}
		}
		s.mu.Lock()
		s.queue = append(queue[:len(queue):len(queue)], s.queue...)
		s.mu.Unlock()
		return err
	}
	return ctx.Err()
}

// flushChunk is how many keys one MGET and one pipeline carry.
const flushChunk = 512

func (s *Sink) flush(ctx context.Context, queue []write) error {
	count := map[string]int{}
	for _, w := range queue {
		count[s.Key(w.model, w.rid)]++
	}
	var single, slow []write
	for _, w := range queue {
		if count[s.Key(w.model, w.rid)] == 1 {
			single = append(single, w)
		} else {
			slow = append(slow, w) // in Apply order
		}
	}
	for len(single) > 0 {
		chunk := single[:min(flushChunk, len(single))]
		single = single[len(chunk):]
		lost, err := s.flushOnce(ctx, chunk)
		if err != nil {
			return err
		}
		slow = append(slow, lost...)
	}
	for _, w := range slow {
		var err error
		if w.meta != nil {
			_, err = s.put(ctx, w.model, w.meta, w.encoded)
		} else {
			_, err = s.Purge(ctx, w.model, w.rid, w.purgedAt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// flushOnce writes writes of distinct keys with one MGET and one pipeline
// of compare-and-sets, and returns those whose key changed in between.
func (s *Sink) flushOnce(ctx context.Context, writes []write) (lost []write, err error) {
	keys := make([]string, len(writes))
	for i, w := range writes {
		keys[i] = s.Key(w.model, w.rid)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: mget %d keys: %w", s.addr, len(keys), err)
	}
	pipe := s.rdb.Pipeline()
	var cmds []*goredis.Cmd
	var sent []write
	for i, w := range writes {
		var cur []byte
		present := "0"
		if v, ok := vals[i].(string); ok {
			cur, present = []byte(v), "1"
		}
		op, value := "set", w.encoded
		if w.meta != nil {
			if decidePut(w.meta, w.encoded, cur) != store.Written {
				continue
			}
		} else {
			if decidePurge(cur, w.purgedAt) != store.Written {
				continue
			}
			op, value = "del", nil
		}
		cmds = append(cmds, casScript.EvalSha(ctx, pipe, []string{keys[i]}, present, cur, op, value))
		sent = append(sent, w)
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	for i, c := range cmds {
		n, err := c.Int()
		switch {
		case err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT"):
			lost = append(lost, sent[i]) // the script is loaded by the one-at-a-time path
		case isWrongType(err):
			return nil, fmt.Errorf("%s: %w", s.addr, foreignKey(keys[i]))
		case err != nil:
			return nil, fmt.Errorf("%s: write %q: %w", s.addr, s.Key(sent[i].model, sent[i].rid), err)
		case n == 0:
			lost = append(lost, sent[i])
		}
	}
	return lost, nil
}

// Close closes the connection pool.
func (s *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s.lease.Close(ctx)
	cancel()
	return s.rdb.Close()
}

// Meta reads one resource's meta back; a missing one wraps fs.ErrNotExist,
// a key that holds no meta (of another type, or undecodable) is an
// InvalidError.
func (s *Sink) Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error) {
	if err := s.checkModel(model); err != nil {
		return nil, fmt.Errorf("%s: %w", s.addr, errors.Join(err, fs.ErrNotExist))
	}
	if err := checkResourceID(resourceID); err != nil {
		return nil, fmt.Errorf("%s: %w", s.addr, errors.Join(err, fs.ErrNotExist))
	}
	b, err := s.Raw(ctx, model, resourceID)
	if err != nil {
		return nil, err
	}
	m, err := DecodeMeta(b)
	if err != nil {
		// Permanent: the key holds bytes no reader can take for a meta.
		return nil, fmt.Errorf("%s: %w", s.addr, store.Invalidf(fmt.Sprintf("meta key %q", s.Key(model, resourceID)), "does not decode as a ResourceMeta: %v", err))
	}
	return m, nil
}

// Revision wraps fs.ErrNotExist: a Redis meta store holds no revisions.
func (s *Sink) Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error) {
	return nil, nil, fmt.Errorf("%s holds no revisions: %w", s.addr, fs.ErrNotExist)
}

// OpenBlob wraps fs.ErrNotExist: a Redis meta store holds no blobs.
func (s *Sink) OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error) {
	return nil, nil, fmt.Errorf("%s holds no blobs: %w", s.addr, fs.ErrNotExist)
}

// Scan yields every key matching pattern once (SCAN may repeat a key; the
// repeats are dropped), in no particular order.
func (s *Sink) Scan(ctx context.Context, pattern string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		seen := map[string]bool{}
		var cursor uint64
		for {
			keys, next, err := s.rdb.Scan(ctx, cursor, pattern, scanCount).Result()
			if err != nil {
				yield("", fmt.Errorf("%s: scan %q: %w", s.addr, pattern, err))
				return
			}
			for _, k := range keys {
				if seen[k] {
					continue
				}
				seen[k] = true
				if !yield(k, nil) {
					return
				}
			}
			if cursor = next; cursor == 0 {
				return
			}
		}
	}
}

// Models lists the models with at least one meta, in byte order (SCAN).
func (s *Sink) Models(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	for k, err := range s.Scan(ctx, s.opts.Pattern("")) {
		if err != nil {
			return nil, err
		}
		if m, _, ok := s.ParseKey(k); ok {
			set[m] = true
		}
	}
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	slices.Sort(out)
	return out, nil
}

// ResourceIDs lists the resources of model, in byte order (one SCAN,
// sorted in memory: Redis keeps no order).
func (s *Sink) ResourceIDs(ctx context.Context, model string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if s.checkModel(model) != nil {
			return // a model the store cannot hold has no resources
		}
		var ids []string
		for k, err := range s.Scan(ctx, s.opts.Pattern(model)) {
			if err != nil {
				yield("", err)
				return
			}
			if m, rid, ok := s.ParseKey(k); ok && m == model {
				ids = append(ids, rid)
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			if !yield(id, nil) {
				return
			}
		}
	}
}
