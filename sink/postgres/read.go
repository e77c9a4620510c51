package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/specstar/replicator/events"
)

// pgUndefinedTable is SQLSTATE undefined_table.
const pgUndefinedTable = "42P01"

// pgUndefined reports whether err is Postgres saying a table does not
// exist.
func pgUndefined(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgUndefinedTable
}

// pgNotExist maps "no such row" and "no such table" to fs.ErrNotExist,
// the sinks' convention for absent records.
func pgNotExist(err error) bool {
	return errors.Is(err, pgx.ErrNoRows) || pgUndefined(err)
}

// Meta reads a resource's stored ResourceMeta from its meta table's data
// column, so a sink can be verified against an archive. It sees what
// Flush committed, not what is queued. The error wraps fs.ErrNotExist if
// there is no such row (or table).
func (p *Sink) Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error) {
	if err := p.check(ctx); err != nil {
		return nil, err
	}
	table, err := p.metaTable(model)
	if err != nil {
		return nil, err
	}
	var raw []byte
	err = p.pool.QueryRow(ctx, p.readSQL(table).selectOne, resourceID).Scan(&raw)
	if pgNotExist(err) {
		return nil, fmt.Errorf("sink: postgres %s row %q: %w", table, resourceID, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("sink: postgres %s row %q: %w", table, resourceID, err)
	}
	meta, err := events.DecodeResourceMeta(p.enc, raw)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres %s row %q: %w", table, resourceID, err)
	}
	return meta, nil
}

// Revision reads one revision through its resource_index row (a None
// schema version is looked up as '__none__'), returning its RevisionInfo
// and payload bytes from resource_data, so a sink (or a database SpecStar
// wrote) can be verified against an archive. It reads the resource tables
// of the prefix even without Revisions. The error wraps fs.ErrNotExist if
// the row (or a table) is missing.
func (p *Sink) Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error) {
	if err := p.check(ctx); err != nil {
		return nil, nil, err
	}
	if _, err := p.metaTable(model); err != nil {
		return nil, nil, err
	}
	sv := pgNoneSchema
	if schemaVersion.IsSet() {
		sv = schemaVersion.Value
	}
	where := fmt.Sprintf("%s row (%q, %q, %q)", p.indexTable, resourceID, revisionID, sv)
	var infoBytes, data []byte
	err := p.pool.QueryRow(ctx, p.rev.readOne, resourceID, revisionID, sv).Scan(&infoBytes, &data)
	if pgNotExist(err) {
		return nil, nil, fmt.Errorf("sink: postgres %s: %w", where, fs.ErrNotExist)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sink: postgres %s: %w", where, err)
	}
	info, err := events.DecodeRevisionInfo(p.enc, infoBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: postgres %s: info: %w", where, err)
	}
	return info, data, nil
}

// OpenBlob always fails with an error wrapping fs.ErrNotExist: Postgres
// holds no blobs (see ApplyBlob); it exists so that a Postgres can be
// verified like any sink.
func (p *Sink) OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error) {
	if err := p.check(ctx); err != nil {
		return nil, nil, err
	}
	return nil, nil, fmt.Errorf("sink: postgres holds no blobs (blob %q): %w", fileID, fs.ErrNotExist)
}
