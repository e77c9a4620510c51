package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// DefaultRescan is how often Follow lists every meta again, to catch what
// a keyspace notification missed (none are sent when the server does not
// allow them, or while the subscription reconnects) and what a fast/slow
// move put in the slow store.
const DefaultRescan = 5 * time.Second

// keyspaceFlags are the notify-keyspace-events classes Follow needs:
// keyspace channel (K), string commands (SET: $), generic commands (DEL,
// RENAME: g), expirations (x) and evictions (e).
const keyspaceFlags = "K$gxe"

// maxSeenBlobs bounds the memory of blob references already yielded; past
// it a blob may be yielded again, which a consumer takes as a replay.
const maxSeenBlobs = 100_000

// FollowOptions tune Follow.
type FollowOptions struct {
	// Rescan is the period of the full rescan (DefaultRescan when 0).
	Rescan time.Duration
	// NoNotifications follows by rescans only, leaving the server's
	// notify-keyspace-events setting alone.
	NoNotifications bool
	// Log gets what Follow could not use (nil: slog.Default()).
	Log *slog.Logger
}

// Follow yields, through fn, every resource's meta (with its revisions
// and the blobs they reference) once, then again each time it becomes
// newer, until ctx ends or fn fails: a change is seen by a keyspace
// notification (Follow turns them on with CONFIG SET where the server
// allows it, adding its classes to those already set, and puts the
// setting back when it ends unless another Follow still needs it or
// someone changed it meanwhile) or by the periodic
// rescan. A meta is yielded only when it is newer than the last one
// yielded for its resource (updated time, revision count, bytes), so a
// resource moving from Redis into the slow store, or seen twice, is never
// yielded again as an older or equal meta; one whose current revision the
// resource store does not hold yet is yielded again, revisions included,
// at each check until it does. A resource Follow yielded that then
// disappears from both stores (a permanent delete) yields a PurgeRecord
// timed when the absence was seen.
func (s *Source) Follow(ctx context.Context, o FollowOptions, fn func(base.Record) error) error {
	if o.Rescan <= 0 {
		o.Rescan = DefaultRescan
	}
	if o.Log == nil {
		o.Log = s.Log
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	d, err := s.Open(ctx)
	if err != nil {
		return err
	}
	defer d.Close()
	d.log = o.Log
	f := &follower{d: d, fn: fn, last: map[string][]byte{}, blobs: map[string]bool{}}
	var notes <-chan string
	if !o.NoNotifications {
		ch, stop, err := d.subscribe(ctx, o.Log)
		if err != nil {
			o.Log.Warn("following by periodic rescans only: keyspace notifications are unavailable", "source", d.name, "why", err)
		} else {
			defer stop()
			notes = ch
		}
	}
	// The first scan comes after the subscription, so a change made
	// during the scan is either scanned or notified.
	if err := f.scan(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(o.Rescan)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := f.scan(ctx); err != nil {
				return err
			}
		case key, ok := <-notes:
			if !ok {
				notes = nil // the subscription ended; rescans go on
				continue
			}
			model, rid, ok := d.Fast.ParseKey(key)
			if !ok {
				continue
			}
			if err := f.check(ctx, model, rid); err != nil {
				return err
			}
		}
	}
}

// follower is one Follow's memory of what it yielded.
type follower struct {
	d     *Deployment
	fn    func(base.Record) error
	last  map[string][]byte // model\0rid -> msgpack of the last meta yielded
	blobs map[string]bool   // file ids already yielded
}

// scan checks every resource of both meta stores, then those yielded
// before that neither lists any more (purged, unless a check finds them).
func (f *follower) scan(ctx context.Context) error {
	models, err := f.d.Models(ctx)
	if err != nil {
		return fmt.Errorf("source %s: %w", f.d.name, err)
	}
	listed := map[string]bool{}
	for _, model := range models {
		ids, err := f.d.ResourceIDs(ctx, model)
		if err != nil {
			return fmt.Errorf("source %s: model %q: %w", f.d.name, model, err)
		}
		for _, id := range ids {
			listed[model+"\x00"+id] = true
			if err := f.check(ctx, model, id); err != nil {
				return err
			}
		}
	}
	for k := range f.last {
		if !listed[k] {
			model, id, _ := strings.Cut(k, "\x00")
			if err := f.check(ctx, model, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// check yields one resource if its meta is newer than the last yielded.
func (f *follower) check(ctx context.Context, model, rid string) error {
	k := model + "\x00" + rid
	meta, err := f.d.Meta(ctx, model, rid)
	if isBadKey(err) {
		return nil // reported; what was yielded for it stands
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, yielded := f.last[k]; !yielded {
			return nil
		}
		// Found in neither store (Redis read first, so not a move).
		purge := &events.PurgeRecord{ResourceID: rid, PurgedTime: events.Time{Time: time.Now().UTC()}}
		if err := f.fn(base.Record{Model: model, Record: purge, Where: "redis meta " + rid + " (gone)"}); err != nil {
			return err
		}
		delete(f.last, k)
		return nil
	}
	if err != nil {
		return fmt.Errorf("source %s: %w", f.d.name, err)
	}
	rec, err := MetaRecord(meta)
	if err != nil {
		return err
	}
	if prev, ok := f.last[k]; ok {
		old, err := events.DecodeResourceMeta(events.Msgpack, prev)
		if err == nil && !Newer(meta, old) {
			return nil
		}
	}
	var stop error
	yield := func(r base.Record, err error) bool {
		if err == nil {
			err = f.fn(r)
		}
		stop = err
		return err == nil
	}
	if !yield(base.Record{Model: model, Record: rec, Where: "redis meta " + rid}, nil) {
		return stop
	}
	refs, current, err := f.d.yieldRevisions(ctx, model, rid, meta.CurrentRevisionID, yield)
	if err != nil {
		if errors.Is(err, errStop) {
			return stop
		}
		return fmt.Errorf("source %s: model %q: %w", f.d.name, model, err)
	}
	for _, ref := range refs {
		if f.blobs[ref.FileID] {
			continue
		}
		if err := f.d.yieldBlob(ctx, model, ref, yield); err != nil {
			if errors.Is(err, errStop) {
				return stop
			}
			return err
		}
		if len(f.blobs) >= maxSeenBlobs {
			clear(f.blobs)
		}
		f.blobs[ref.FileID] = true
	}
	if current {
		f.last[k] = rec.Data
	}
	// Else the meta names a revision the resource store does not show
	// yet (a writer that stores metas first): the resource is yielded
	// again, with its revisions, until it does.
	return nil
}

// followClientName starts the connection name of every Follow's
// subscription, so that a Follow that ends can tell whether another one
// (of any process) still follows the server.
const followClientName = "specstar-replicator-follow"

// subscribe turns on keyspace notifications for the store's keys (adding
// keyspaceFlags to the server's setting) and returns the keys they name;
// stop ends the subscription and puts back the setting it changed (see
// restoreFlags).
func (d *Deployment) subscribe(ctx context.Context, log *slog.Logger) (<-chan string, func(), error) {
	rdb := d.Fast.Client()
	cur, err := rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return nil, nil, fmt.Errorf("CONFIG GET notify-keyspace-events: %w", err)
	}
	was := cur["notify-keyspace-events"]
	if saved, err := rdb.Get(ctx, savedFlagsKey).Result(); err == nil && sameFlags(was, mergeFlags(saved, keyspaceFlags)) && !anotherFollower(ctx, rdb) {
		// A tail killed before it could put the setting back changed it
		// from saved (no tail that could is still subscribed): that is
		// the original, not what it left.
		was = saved
	}
	want := mergeFlags(was, keyspaceFlags)
	if want != was {
		if err := rdb.Set(ctx, savedFlagsKey, was, 0).Err(); err != nil {
			log.Warn("could not keep the server's notify-keyspace-events where a restart finds it; a killed tail leaves it changed", "source", d.name, "key", savedFlagsKey, "err", err)
		}
		if err := rdb.ConfigSet(ctx, "notify-keyspace-events", want).Err(); err != nil {
			return nil, nil, fmt.Errorf("CONFIG SET notify-keyspace-events %s: %w", want, err)
		}
	}
	// The subscription has a connection of its own, named so that other
	// Follows see it (restoreFlags).
	var id [8]byte
	_, _ = rand.Read(id[:])
	opts := *rdb.Options()
	opts.ClientName = followClientName + "-" + hex.EncodeToString(id[:])
	sub := goredis.NewClient(&opts)
	restore := func() {
		if want != was {
			d.restoreFlags(context.WithoutCancel(ctx), log, was, want, opts.ClientName)
		}
	}
	channel := fmt.Sprintf("__keyspace@%d__:", opts.DB)
	ps := sub.PSubscribe(ctx, channel+d.Fast.Options().Pattern(""))
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		ps.Close()
		sub.Close()
		restore()
		return nil, nil, fmt.Errorf("PSUBSCRIBE: %w", err)
	}
	out := make(chan string, 1024)
	subCtx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(out)
		for msg := range ps.Channel() {
			select {
			case out <- strings.TrimPrefix(msg.Channel, channel):
			case <-subCtx.Done():
				return
			}
		}
	}()
	stop := func() {
		cancel()
		ps.Close()
		sub.Close()
		restore()
	}
	return out, stop, nil
}

// restoreTimeout bounds putting back notify-keyspace-events when Follow
// ends.
const restoreTimeout = 5 * time.Second

// restoreFlags puts notify-keyspace-events back to was, the setting
// before this Follow changed it to want, unless it is no longer want
// (someone changed it since) or another Follow (a connection named
// followClientName other than self) still subscribes: that one needs it.
func (d *Deployment) restoreFlags(ctx context.Context, log *slog.Logger, was, want, self string) {
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	rdb := d.Fast.Client()
	cur, err := rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		log.Warn("could not put back the server's notify-keyspace-events", "source", d.name, "was", was, "err", err)
		return
	}
	if now := cur["notify-keyspace-events"]; !sameFlags(now, want) {
		log.Info("notify-keyspace-events changed by someone else since the tail set it; left as it is", "source", d.name, "now", now, "was", was)
		rdb.Del(ctx, savedFlagsKey)
		return
	}
	if list, err := rdb.ClientList(ctx).Result(); err == nil {
		if other := otherFollower(list, self); other != "" {
			log.Info("notify-keyspace-events left on: another tail follows the server", "source", d.name, "client", other, "was", was)
			return
		}
	}
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", was).Err(); err != nil {
		log.Warn("could not put back the server's notify-keyspace-events", "source", d.name, "was", was, "err", err)
		return
	}
	rdb.Del(ctx, savedFlagsKey)
}

// savedFlagsKey holds the server's notify-keyspace-events as it was
// before a tail changed it, so that the next tail puts back the original
// even when the one that changed it was killed (and not what it left).
// No SpecStar key pattern matches it (theirs hold "resource_meta:").
const savedFlagsKey = "specstar-replicator:notify-keyspace-events-before"

// anotherFollower reports whether a Follow's subscription is connected
// to the server (or whether that cannot be told: then one is assumed).
func anotherFollower(ctx context.Context, rdb *goredis.Client) bool {
	list, err := rdb.ClientList(ctx).Result()
	return err != nil || otherFollower(list, "") != ""
}

// sameFlags reports whether two notify-keyspace-events settings hold the
// same classes (the server spells them in its own order).
func sameFlags(a, b string) bool {
	ra, rb := []rune(a), []rune(b)
	slices.Sort(ra)
	slices.Sort(rb)
	return slices.Equal(ra, rb)
}

// otherFollower is the name of a connection in CLIENT LIST's reply that
// is another Follow's subscription (named followClientName, not self,
// with a pattern subscription), or "".
func otherFollower(list, self string) string {
	for line := range strings.Lines(list) {
		var name string
		psub := false
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "name":
				name = v
			case "psub":
				psub = v != "0" && v != ""
			}
		}
		if psub && name != self && strings.HasPrefix(name, followClientName) {
			return name
		}
	}
	return ""
}

// mergeFlags adds the notify-keyspace-events classes of add to cur that it
// lacks ("A" already stands for every command class).
func mergeFlags(cur, add string) string {
	out := cur
	for _, c := range add {
		if strings.ContainsRune(out, c) || (strings.ContainsRune(out, 'A') && strings.ContainsRune("$gxe", c)) {
			continue
		}
		out += string(c)
	}
	return out
}
