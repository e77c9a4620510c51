package disk

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Spec is a parsed disk sink URL: the root and options to open, and the
// durable consumer name and model filter of the replicator reading into it.
type Spec struct {
	Root    string   // absolute root directory
	Options Options  // layout and durability options
	Name    string   // durable consumer name (name=, else derived from Root)
	Models  []string // models= filter; empty means every model
	// SyncSet says the URL chose sync= itself, so a command's own default
	// (mirror's sync=batch) does not override it.
	SyncSet bool
}

// ParseSpec reads a disk sink URL: "disk:/path", "disk:///path", a plain
// path, or any of them with
// "?encoding=msgpack&meta=sqlite&index=symlink&on_duplicate=skip&sync=batch&name=N&models=a,b".
// Errors do not repeat the URL; the caller names it.
func ParseSpec(raw string) (*Spec, error) {
	s := &Spec{}
	rest := raw
	if strings.HasPrefix(raw, "disk:") {
		rest = strings.TrimPrefix(raw, "disk:")
		rest = strings.TrimPrefix(rest, "//")
	}
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, fmt.Errorf("empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	s.Root = abs
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, err
	}
	s.Options.DetectMeta = !q.Has("meta")
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "encoding":
			if s.Options.Encoding, err = events.ParseEncoding(v); err != nil {
				return nil, err
			}
		case "meta":
			switch v {
			case "files":
			case "sqlite":
				s.Options.SQLiteMeta = true
			default:
				return nil, fmt.Errorf("meta=%q (want files or sqlite)", v)
			}
		case "index":
			switch v {
			case "uid":
			case "symlink":
				s.Options.SymlinkIndex = true
			default:
				return nil, fmt.Errorf("index=%q (want uid or symlink)", v)
			}
		case "on_duplicate":
			switch v {
			case "newer", "":
			case "overwrite", "skip", "raise_error":
				s.Options.OnDuplicate = v
			default:
				return nil, fmt.Errorf("on_duplicate=%q (want newer, overwrite, skip or raise_error)", v)
			}
		case "sync":
			s.SyncSet = true
			switch v {
			case "file":
			case "batch":
				s.Options.SyncPerBatch = true
			default:
				return nil, fmt.Errorf("sync=%q (want file or batch)", v)
			}
		case "name":
			s.Name = v
		case "models":
			s.Models = store.SplitList(v)
		default:
			return nil, fmt.Errorf("unknown option %q", k)
		}
	}
	if s.Name == "" {
		// Stable across restarts for the same destination, so the durable
		// consumer picks up where it left off.
		h := xxh3.HashString128("disk:" + s.Root).Bytes()
		s.Name = fmt.Sprintf("sink-disk-%x", h[:6])
	}
	return s, nil
}

// Consumer is the durable consumer name and model filter, as every
// backend's Spec gives them to the root sink package.
func (s *Spec) Consumer() (name string, models []string) { return s.Name, s.Models }

// Holds says which records the sink keeps: a disk deployment keeps all.
func (s *Spec) Holds() (revisions, blobs bool) { return true, true }

// Open opens the sink the Spec names.
func (s *Spec) Open(ctx context.Context) (*Sink, error) {
	return Open(ctx, s.Root, s.Options)
}

// OpenReadOnly opens the sink the Spec names for reading back only (see
// Options.ReadOnly).
func (s *Spec) OpenReadOnly(ctx context.Context) (*Sink, error) {
	opts := s.Options
	opts.ReadOnly = true
	return Open(ctx, s.Root, opts)
}
