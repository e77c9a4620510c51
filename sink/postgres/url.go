package postgres

import (
	"context"
	"fmt"
	"net/url"

	"github.com/specstar/replicator/internal/redact"

	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Spec is a parsed postgres:// sink URL: the connection string and options
// to open, and the durable consumer name and model filter of the
// replicator reading into it.
type Spec struct {
	DSN     string   // connection string, without the sink's own options
	Options Options  // tables and encoding
	Name    string   // durable consumer name (name=, else derived from host, database and tables)
	Models  []string // models= filter; empty means every model
}

// isOptionKey says whether k is one of the query parameters of a postgres:// sink URL that
// configure the sink; all others are left to the driver.
func isOptionKey(k string) bool {
	switch k {
	case "encoding", "meta_table", "table_prefix", "revisions", "on_duplicate", "name", "models":
		return true
	}
	return false
}

// ParseSpec reads postgres://user@host/db?sslmode=...&encoding=json
// &meta_table={model}_meta&table_prefix=p_&revisions=true&on_duplicate=...
// &name=N&models=a,b. Errors do not repeat the URL, which may hold a
// password; the caller names it redacted.
func ParseSpec(raw string) (*Spec, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, redact.ParseError(err)
	}
	// Alone, a Postgres sink serves every layer Postgres can hold (metas
	// and revisions), as the Postgres source reads them by default.
	s := &Spec{Options: Options{Revisions: true}}
	q := u.Query()
	driver := url.Values{}
	for k, vs := range q {
		if !isOptionKey(k) {
			driver[k] = vs
			continue
		}
		v := vs[len(vs)-1]
		switch k {
		case "encoding":
			e, err := events.ParseEncoding(v)
			if err != nil {
				return nil, err
			}
			s.Options.Encoding = events.Some(e)
		case "meta_table":
			s.Options.MetaTable = v
		case "table_prefix":
			s.Options.TablePrefix = v
		case "revisions":
			s.Options.Revisions = v == "true" || v == "1" || v == "yes"
		case "on_duplicate":
			if v != "newer" {
				s.Options.OnDuplicate = v
			}
		case "name":
			s.Name = v
		case "models":
			s.Models = store.SplitList(v)
		}
	}
	u.RawQuery = driver.Encode()
	s.DSN = u.String()
	if s.Name == "" {
		// Stable for the same database and tables, whatever the password.
		id := u.Host + u.Path + "|" + s.Options.TablePrefix + "|" + s.Options.MetaTable
		h := xxh3.HashString128("postgres:" + id).Bytes()
		s.Name = fmt.Sprintf("sink-pg-%x", h[:6])
	}
	return s, nil
}

// Consumer is the durable consumer name and model filter, as every
// backend's Spec gives them to the root sink package.
func (s *Spec) Consumer() (name string, models []string) { return s.Name, s.Models }

// Holds says which records the sink keeps: metas, revisions unless
// revisions=false, never blobs.
func (s *Spec) Holds() (revisions, blobs bool) { return s.Options.Revisions, false }

// Open opens the sink the Spec names.
func (s *Spec) Open(ctx context.Context) (*Sink, error) {
	return Open(ctx, s.DSN, s.Options)
}

// OpenReader opens the sink the Spec names to read it back: without the
// writer lock.
func (s *Spec) OpenReader(ctx context.Context) (*Sink, error) {
	opts := s.Options
	opts.ReadOnly = true
	return Open(ctx, s.DSN, opts)
}
