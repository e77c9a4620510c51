package postgres

// Table names and their creation: what a model's tables are called, the
// statements that read and write them, and CREATE TABLE IF NOT EXISTS.

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/specstar/replicator/sink/internal/store"
)

// pgNoneSchema is PostgresResourceStore's stand-in for a None
// schema_version in resource_index, whose primary key cannot hold NULL.
const pgNoneSchema = "__none__"

// pgMaxIdent is the longest identifier Postgres keeps (NAMEDATALEN-1
// bytes); longer ones are silently truncated, so they are refused.
const pgMaxIdent = 63

// pgMaxIndexed bounds a text value in a btree-indexed column: a btree
// entry must fit in about a third of a page (2704 bytes), and a value that
// does not would fail the whole Flush.
const pgMaxIndexed = 2000

// pgMaxSlotKey bounds the three columns of resource_index's primary key
// together, for the same reason.
const pgMaxSlotKey = 2600

// pgCheckConfigName validates a configured name part: ASCII letters,
// digits and "_" (and the {model} placeholder in a template), so that the
// names are plain and never need more than quoting.
func pgCheckConfigName(what, s string, template bool) error {
	rest := s
	if template {
		rest = strings.ReplaceAll(s, "{model}", "")
		if rest == "" && s == "" {
			return store.Invalid(fmt.Sprintf("%s %q", what, s), "empty")
		}
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return store.Invalidf(fmt.Sprintf("%s %q", what, s), "character %q is not an ASCII letter, digit or '_'", c)
		}
	}
	return nil
}

// pgCheckTableName refuses a table name Postgres would truncate.
func pgCheckTableName(name, what string) error {
	if name == "" {
		return store.Invalid(fmt.Sprintf("%s %q", what, name), "empty")
	}
	if len(name) > pgMaxIdent {
		return store.Invalidf(fmt.Sprintf("%s %q", what, name),
			"%d bytes, longer than a Postgres identifier may be (%d; longer names are truncated)", len(name), pgMaxIdent)
	}
	return nil
}

// metaTable returns the meta table of a model, validating the model name
// as a part of a table name: letters, digits, "_" and "-" only.
func (p *Sink) metaTable(model string) (string, error) {
	key := fmt.Sprintf("model %q", model)
	if model == "" {
		return "", store.Invalid(key, "empty")
	}
	if !utf8.ValidString(model) {
		return "", store.Invalid(key, "not valid UTF-8")
	}
	for _, r := range model {
		if !(r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return "", store.Invalidf(key, "character %q cannot be part of a table name here (letters, digits, '_' and '-' can)", r)
		}
	}
	name := p.opts.TablePrefix + strings.ReplaceAll(p.metaTmpl, "{model}", model)
	if len(name) > pgMaxIdent {
		return "", store.Invalidf(key, "meta table name %q is %d bytes, longer than a Postgres identifier may be (%d)",
			name, len(name), pgMaxIdent)
	}
	return name, nil
}

// metaSQL returns the statements of a model's meta table, creating or
// upgrading the table the first time.
func (p *Sink) metaSQL(ctx context.Context, table string) (*pgMetaSQL, error) {
	p.mu.Lock()
	s := p.tables[table]
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	unlock := p.tableLocks.Lock(table)
	defer unlock()
	p.mu.Lock()
	s = p.tables[table]
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	if err := pgEnsureMetaTable(ctx, p.pool, table); err != nil {
		return nil, err
	}
	s = newPgMetaSQL(table)
	p.mu.Lock()
	p.tables[table] = s
	p.mu.Unlock()
	return s, nil
}

// readSQL returns the statements of a meta table for reading, which
// changes nothing in the database (a missing table reads as not-exist).
func (p *Sink) readSQL(table string) *pgMetaSQL {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.tables[table]; s != nil {
		return s
	}
	return newPgMetaSQL(table)
}

// EnsureModel creates or upgrades a model's meta table now rather than at
// its first record, so that a deployment can check its schema at startup.
func (p *Sink) EnsureModel(ctx context.Context, model string) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	table, err := p.metaTable(model)
	if err != nil {
		return err
	}
	_, err = p.metaSQL(ctx, table)
	return err
}

// ensureTables makes sure the tables the queue writes exist: they were
// checked when the first record of each was applied, and are checked again
// after a Flush found one missing.
func (p *Sink) ensureTables(ctx context.Context, pending []pgWrite) error {
	p.mu.Lock()
	lostRev := p.lostRev
	p.mu.Unlock()
	seen := map[string]bool{}
	hasRev := false
	for _, w := range pending {
		table := ""
		switch {
		case w.meta != nil:
			table = w.meta.key.table
		case w.purge != nil:
			table = w.purge.key.table
			hasRev = hasRev || p.opts.Revisions
		default:
			hasRev = true
			continue
		}
		if !seen[table] {
			seen[table] = true
			if _, err := p.metaSQL(ctx, table); err != nil {
				return err
			}
		}
	}
	if hasRev && lostRev {
		if err := pgEnsureResourceTables(ctx, p.pool, p.dataTable, p.indexTable); err != nil {
			return err
		}
		p.mu.Lock()
		p.lostRev = false
		p.mu.Unlock()
	}
	return nil
}
