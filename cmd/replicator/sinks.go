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
	"github.com/specstar/replicator/source"
)

// applier is what the worker needs from a sink.
type applier interface {
	ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (sink.Outcome, error)
	ApplyRevision(ctx context.Context, model string, res *events.RawResource) (sink.Outcome, error)
	ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (sink.Outcome, error)
	ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (sink.Outcome, error)
	Flush(ctx context.Context) error
	Close() error
}

// sinkSpec is one --sink value, parsed.
type sinkSpec struct {
	raw    string
	kind   string // "disk", "postgres", "s3" or "deployment"
	path   string // disk root
	dsn    string // postgres connection string, without our options
	name   string // durable consumer name
	models []string
	disk   sink.DiskOptions
	pg     sink.PostgresOptions
	s3     s3Spec
	layers *layerSpecs // kind "deployment": one store per layer
}

// postgresOptionKeys are the query parameters of a postgres:// sink URL
// that configure the sink; all others are left to the driver.
var postgresOptionKeys = map[string]bool{
	"encoding": true, "meta_table": true, "table_prefix": true, "revisions": true,
	"on_duplicate": true, "name": true, "models": true,
}

// parsePostgresSink reads postgres://user@host/db?sslmode=...&encoding=json
// &meta_table={model}_meta&table_prefix=p_&revisions=true&on_duplicate=...
func parsePostgresSink(raw string) (*sinkSpec, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", source.Redact(raw), err)
	}
	s := &sinkSpec{raw: source.Redact(raw), kind: "postgres"}
	q := u.Query()
	driver := url.Values{}
	for k, vs := range q {
		if !postgresOptionKeys[k] {
			driver[k] = vs
			continue
		}
		v := vs[len(vs)-1]
		switch k {
		case "encoding":
			e, err := events.ParseEncoding(v)
			if err != nil {
				return nil, fmt.Errorf("sink %q: %w", s.raw, err)
			}
			s.pg.Encoding = events.Some(e)
		case "meta_table":
			s.pg.MetaTable = v
		case "table_prefix":
			s.pg.TablePrefix = v
		case "revisions":
			s.pg.Revisions = v == "true" || v == "1" || v == "yes"
		case "on_duplicate":
			if v != "newer" {
				s.pg.OnDuplicate = v
			}
		case "name":
			s.name = v
		case "models":
			s.models = splitList(v)
		}
	}
	u.RawQuery = driver.Encode()
	s.dsn = u.String()
	if s.name == "" {
		// Stable for the same database and tables, whatever the password.
		id := u.Host + u.Path + "|" + s.pg.TablePrefix + "|" + s.pg.MetaTable
		h := xxh3.HashString128("postgres:" + id).Bytes()
		s.name = fmt.Sprintf("sink-pg-%x", h[:6])
	}
	return s, nil
}

func splitList(v string) []string {
	var out []string
	for _, m := range strings.Split(v, ",") {
		if m != "" {
			out = append(out, m)
		}
	}
	return out
}

// parseSink reads a sink URL: "disk:/path", a plain path,
// "disk:/path?encoding=msgpack&meta=sqlite&index=symlink&on_duplicate=skip&sync=batch&name=N&models=a,b",
// or a postgres:// URL (see parsePostgresSink).
func parseSink(raw string) (*sinkSpec, error) {
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		s, err := parsePostgresSink(raw)
		if err != nil {
			return nil, err
		}
		return s, checkName(s)
	}
	if strings.HasPrefix(raw, "s3://") {
		s, err := parseS3Sink(raw)
		if err != nil {
			return nil, err
		}
		return s, checkName(s)
	}
	s := &sinkSpec{raw: raw, kind: "disk"}
	rest := raw
	switch {
	case strings.HasPrefix(raw, "disk:"):
		rest = strings.TrimPrefix(raw, "disk:")
		rest = strings.TrimPrefix(rest, "//")
	case strings.Contains(raw, "://"):
		scheme, _, _ := strings.Cut(raw, "://")
		return nil, fmt.Errorf("sink %q: %s sinks are not available (disk:/path, postgres:// and s3:// are)", raw, scheme)
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
		case "sync":
			switch v {
			case "file":
			case "batch":
				s.disk.SyncPerBatch = true
			default:
				return nil, fmt.Errorf("sink %q: sync=%q (want file or batch)", raw, v)
			}
		case "name":
			s.name = v
		case "models":
			s.models = splitList(v)
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
	return s, checkName(s)
}

func checkName(s *sinkSpec) error {
	if strings.ContainsAny(s.name, ".*> \t") {
		return fmt.Errorf("sink %q: name %q may not contain '.', '*', '>' or spaces", s.raw, s.name)
	}
	return nil
}

func (s *sinkSpec) open(ctx context.Context) (applier, error) {
	switch s.kind {
	case "deployment":
		return s.layers.open(ctx, s.raw)
	case "s3":
		return s.openS3(ctx)
	}
	if s.kind == "postgres" {
		p, err := sink.OpenPostgres(ctx, s.dsn, s.pg)
		if err != nil {
			return nil, fmt.Errorf("open sink %s: %w", s.raw, err)
		}
		return p, nil
	}
	d, err := sink.OpenDisk(ctx, s.path, s.disk)
	if err != nil {
		return nil, fmt.Errorf("open sink %s: %w", s.raw, err)
	}
	return d, nil
}

// where names the sink's destination for people.
func (s *sinkSpec) where() string {
	if s.kind == "disk" && s.layers == nil {
		return s.path
	}
	return s.raw
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
