package redis

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	goredis "github.com/redis/go-redis/v9"
	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/redact"
	"github.com/specstar/replicator/sink/internal/store"
)

// Spec is a parsed redis:// sink URL: the server to connect to, the key
// layout, and the durable consumer name and model filter of the
// replicator reading into it.
type Spec struct {
	// Client are the connection options (address, database, password,
	// timeouts) go-redis reads from the URL without the sink's options.
	Client *goredis.Options
	// Options are the key layout and encoding.
	Options Options
	// Name is the durable consumer name (name=, else derived from the
	// server, database and prefix).
	Name string
	// Models is the models= filter; empty means every model.
	Models []string
}

// isOptionKey says whether k is one of the sink's own query parameters;
// all others are go-redis's (dial_timeout=, pool_size=...).
func isOptionKey(k string) bool {
	switch k {
	case "prefix", "encoding", "name", "models", "on_duplicate", "slow":
		return true
	}
	return false
}

// ParseSpec reads redis://[user:password@]host:port/db?prefix={model}:
// &encoding=json|msgpack&name=N&models=a,b (rediss:// for TLS). The prefix
// defaults to DefaultPrefix; a prefix without {model} serves one model
// and needs models= naming exactly it. Errors do not repeat the URL,
// which may hold a password; the caller names it redacted.
func ParseSpec(raw string) (*Spec, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, redact.ParseError(err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("scheme %q is not redis or rediss", u.Scheme)
	}
	if u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("no server: want redis://[:password@]host:port/db")
	}
	s := &Spec{Options: Options{Prefix: DefaultPrefix, Encoding: events.JSON}}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	driver := url.Values{}
	for k, vs := range q {
		if !isOptionKey(k) {
			driver[k] = vs
			continue
		}
		v := vs[len(vs)-1]
		switch k {
		case "prefix":
			s.Options.Prefix = v
		case "encoding":
			e, err := events.ParseEncoding(v)
			if err != nil {
				return nil, err
			}
			s.Options.Encoding = e
		case "name":
			s.Name = v
		case "models":
			s.Models = store.SplitList(v)
		case "slow":
			return nil, fmt.Errorf("slow= names the slow store of a fast/slow deployment, which only the Redis source reads; a sink writes the Redis store alone (give the slow store as a sink of its own)")
		case "on_duplicate":
			if v != "newer" && v != "" {
				return nil, fmt.Errorf("on_duplicate=%q: a Redis meta store keeps the newer meta only (on_duplicate=newer)", v)
			}
		}
	}
	if !strings.Contains(s.Options.Prefix, ModelPlaceholder) {
		if len(s.Models) != 1 {
			return nil, fmt.Errorf("prefix %q has no %s: it holds one model, so models= must name exactly one", s.Options.Prefix, ModelPlaceholder)
		}
		s.Options.Model = s.Models[0]
	}
	u.RawQuery = driver.Encode()
	if s.Client, err = goredis.ParseURL(u.String()); err != nil {
		return nil, redact.ParseError(err)
	}
	if s.Name == "" {
		// Stable for the same server, database and prefix, whatever the password.
		h := xxh3.HashString128(fmt.Sprintf("redis:%s/%d|%s", s.Client.Addr, s.Client.DB, s.Options.Prefix)).Bytes()
		s.Name = fmt.Sprintf("sink-redis-%x", h[:6])
	}
	return s, nil
}

// Consumer is the durable consumer name and model filter, as every
// backend's Spec gives them to the root sink package.
func (s *Spec) Consumer() (name string, models []string) { return s.Name, s.Models }

// Holds says which records the sink keeps beside metas: none.
func (s *Spec) Holds() (revisions, blobs bool) { return false, false }

// Open connects to the server the Spec names.
func (s *Spec) Open(ctx context.Context) (*Sink, error) {
	return Open(ctx, s.Client, s.Options)
}
