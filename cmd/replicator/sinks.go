package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
)

// applier is what the worker needs from a sink.
type applier interface {
	ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (sink.Outcome, error)
	ApplyRevision(ctx context.Context, model string, res *events.RawResource) (sink.Outcome, error)
	ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (sink.Outcome, error)
	Flush(ctx context.Context) error
	Close() error
}

// sinkSpec is one --sink value, parsed.
type sinkSpec struct {
	raw    string
	kind   string // "disk"
	path   string
	name   string   // durable consumer name
	models []string // only these models (all if empty)
	disk   sink.DiskOptions
}

// parseSink reads a sink URL: "disk:/path", a plain path, or
// "disk:/path?encoding=msgpack&meta=sqlite&index=symlink&on_duplicate=skip&name=N&models=a,b".
func parseSink(raw string) (*sinkSpec, error) {
	s := &sinkSpec{raw: raw, kind: "disk"}
	rest := raw
	switch {
	case strings.HasPrefix(raw, "disk:"):
		rest = strings.TrimPrefix(raw, "disk:")
		rest = strings.TrimPrefix(rest, "//")
	case strings.Contains(raw, "://"):
		scheme, _, _ := strings.Cut(raw, "://")
		return nil, fmt.Errorf("sink %q: %s sinks are not available yet (disk:/path is)", raw, scheme)
	}
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, fmt.Errorf("sink %q: empty path", raw)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", raw, err)
	}
	s.path = abs
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", raw, err)
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "encoding":
			if s.disk.Encoding, err = events.ParseEncoding(v); err != nil {
				return nil, fmt.Errorf("sink %q: %w", raw, err)
			}
		case "meta":
			switch v {
			case "files":
			case "sqlite":
				s.disk.SQLiteMeta = true
			default:
				return nil, fmt.Errorf("sink %q: meta=%q (want files or sqlite)", raw, v)
			}
		case "index":
			switch v {
			case "uid":
			case "symlink":
				s.disk.SymlinkIndex = true
			default:
				return nil, fmt.Errorf("sink %q: index=%q (want uid or symlink)", raw, v)
			}
		case "on_duplicate":
			switch v {
			case "newer", "":
			case "overwrite", "skip", "raise_error":
				s.disk.OnDuplicate = v
			default:
				return nil, fmt.Errorf("sink %q: on_duplicate=%q (want newer, overwrite, skip or raise_error)", raw, v)
			}
		case "name":
			s.name = v
		case "models":
			for _, m := range strings.Split(v, ",") {
				if m != "" {
					s.models = append(s.models, m)
				}
			}
		default:
			return nil, fmt.Errorf("sink %q: unknown option %q", raw, k)
		}
	}
	if s.name == "" {
		// Stable across restarts for the same destination, so the durable
		// consumer picks up where it left off.
		h := xxh3.HashString128("disk:" + s.path).Bytes()
		s.name = fmt.Sprintf("sink-disk-%x", h[:6])
	}
	if strings.ContainsAny(s.name, ".*> \t") {
		return nil, fmt.Errorf("sink %q: name %q may not contain '.', '*', '>' or spaces", raw, s.name)
	}
	return s, nil
}

func (s *sinkSpec) open(ctx context.Context) (applier, error) {
	d, err := sink.OpenDisk(ctx, s.path, s.disk)
	if err != nil {
		return nil, fmt.Errorf("open sink %s: %w", s.raw, err)
	}
	return d, nil
}

// filters are the consumer's subject filters.
func (s *sinkSpec) filters(prefix string) []string {
	if len(s.models) == 0 {
		return []string{prefix + ".>"}
	}
	out := make([]string, 0, len(s.models))
	for _, m := range s.models {
		out = append(out, prefix+"."+events.SubjectToken(m)+".>")
	}
	return out
}
