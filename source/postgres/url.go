package postgres

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/specstar/replicator/internal/redact"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// postgresURLKeys are the query parameters of a postgres:// source URL
// that configure the source; all others go to the driver.
var postgresURLKeys = map[string]bool{
	"encoding": true, "meta_table": true, "table_prefix": true, "revisions": true, "models": true, "blobs": true,
	"resources": true,
}

// ParseURL splits a source URL such as
// postgres://user@host/db?sslmode=disable&table_prefix=p_&revisions=false
// into the driver's DSN and the source options. revisions defaults to
// true (a Postgres resource store); set revisions=false for a deployment
// whose revisions live in S3 or on disk. resources= names that resource
// store (an s3:// URL, query-escaped) and implies revisions=false; the
// caller opens it and sets RevisionsFrom. blobs= names the deployment's
// blob store (a DiskBlobStore directory or an s3:// URL), whose blobs are
// then published with the revisions that reference them.
func ParseURL(raw string) (dsn string, opts Options, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", opts, fmt.Errorf("source %q: %w", base.Redact(raw), redact.ParseError(err))
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", opts, fmt.Errorf("source %q: want a postgres:// URL", base.Redact(raw))
	}
	opts.Revisions = true
	driver := url.Values{}
	for k, vs := range u.Query() {
		if !postgresURLKeys[k] {
			driver[k] = vs
			continue
		}
		v := vs[len(vs)-1]
		switch k {
		case "encoding":
			e, err := events.ParseEncoding(v)
			if err != nil {
				return "", opts, fmt.Errorf("source %q: %w", base.Redact(raw), err)
			}
			opts.Encoding = events.Some(e)
		case "meta_table":
			opts.MetaTable = v
		case "table_prefix":
			opts.TablePrefix = v
		case "revisions":
			opts.Revisions = v != "false" && v != "0" && v != "no"
		case "blobs":
			opts.Blobs = v
		case "resources":
			opts.Resources = v
		case "models":
			for _, m := range strings.Split(v, ",") {
				if m != "" {
					opts.Models = append(opts.Models, m)
				}
			}
		}
	}
	if opts.Resources != "" {
		opts.Revisions = false
	}
	u.RawQuery = driver.Encode()
	return u.String(), opts, nil
}

// ID names a Postgres source stably (host, database, tables and
// models, never the password), to key its stored position.
func ID(dsn string, opts Options) string {
	u, err := url.Parse(dsn)
	host := dsn
	if err == nil {
		host = u.Host + u.Path
	}
	id := fmt.Sprintf("postgres|%s|%s|%s|%s|%v", host, opts.TablePrefix, opts.MetaTable, strings.Join(opts.Models, ","), opts.Revisions)
	if opts.Resources != "" {
		// A deployment read with its resource store is another source
		// than its metas alone: its position is kept apart.
		id += "|" + base.Redact(opts.Resources)
	}
	return id
}
