package postgres

// Apply: each record validated (what Postgres would refuse is refused
// here) and queued for the batch's Flush.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// pgWrite is one queued record: exactly one of meta, rev and purge is set.
type pgWrite struct {
	meta  *pgMetaWrite
	rev   *pgRevWrite
	purge *pgPurgeWrite
}

// pgMetaKey is a meta row: its table and resource id.
type pgMetaKey struct{ table, rid string }

// pgMetaWrite is a meta ready to be written: its row (the 14 columns, data
// second) and what orders it against another meta of the resource.
type pgMetaWrite struct {
	model   string
	key     pgMetaKey
	sql     *pgMetaSQL
	row     []any
	data    []byte
	updated time.Time
	count   int64
}

// pgSlotKey is a resource_index row's key, schema_version as stored.
type pgSlotKey struct{ rid, revID, sv string }

// pgRevWrite is a revision ready to be written.
type pgRevWrite struct {
	info      events.RevisionInfo // without Unknown: only ordering fields are used
	infoBytes []byte
	data      []byte
	slot      pgSlotKey
}

// ApplyMeta validates a ResourceMeta and queues it for the next Flush,
// returning Written ("queued"). Flush writes it only if it is newer than
// the stored row (updated_time as an instant, naive read as UTC, then
// total_revision_count, then the encoded bytes, as the Disk sink), so a
// replayed or older meta is a no-op there. With OnDuplicate "skip" or
// "raise_error" the stored row (or a meta queued earlier) is read now: an
// identical meta gives Unchanged, a different one Skipped (and the
// resource's later revisions are skipped) or an *InvalidError.
func (p *Sink) ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error) {
	if err := p.check(ctx); err != nil {
		return 0, err
	}
	if meta == nil {
		return 0, store.Invalid("meta", "nil")
	}
	table, err := p.metaTable(model)
	if err != nil {
		return 0, err
	}
	key := fmt.Sprintf("meta %q", meta.ResourceID)
	if meta.ResourceID == "" {
		return 0, store.Invalid(key, "empty resource_id")
	}
	encoded, err := meta.Encode(p.enc)
	if err != nil {
		return 0, store.Invalidf(key, "cannot be encoded in %v: %v", p.enc, err)
	}
	row, err := pgMetaRow(meta, encoded)
	if err != nil {
		return 0, err
	}
	s, err := p.metaSQL(ctx, table)
	if err != nil {
		return 0, err
	}
	w := &pgMetaWrite{
		model:   model,
		key:     pgMetaKey{table, meta.ResourceID},
		sql:     s,
		row:     row,
		data:    encoded,
		updated: meta.UpdatedTime.Instant(),
		count:   meta.TotalRevisionCount,
	}
	if p.opts.OnDuplicate == store.DupSkip || p.opts.OnDuplicate == store.DupRaise {
		return p.queueDuplicateChecked(ctx, w)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, pgWrite{meta: w})
	return store.Written, nil
}

// queueDuplicateChecked queues a meta under OnDuplicate "skip" or
// "raise_error", which need to know now whether a different meta of the
// resource exists: stored, or queued earlier in this run.
func (p *Sink) queueDuplicateChecked(ctx context.Context, w *pgMetaWrite) (store.Outcome, error) {
	var stored []byte
	err := p.pool.QueryRow(ctx, w.sql.selectOne, w.key.rid).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		stored, err = nil, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sink: postgres read %s row %q: %w", w.key.table, w.key.rid, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	existing := stored
	if existing == nil {
		existing = p.firstMeta[w.key]
	}
	switch {
	case existing == nil:
		p.firstMeta[w.key] = w.data
		p.queue = append(p.queue, pgWrite{meta: w})
		return store.Written, nil
	case bytes.Equal(existing, w.data):
		return store.Unchanged, nil
	case p.opts.OnDuplicate == store.DupSkip:
		m := p.skipped[w.model]
		if m == nil {
			m = map[string]struct{}{}
			p.skipped[w.model] = m
		}
		m[w.key.rid] = struct{}{}
		return store.Skipped, nil
	}
	return 0, store.Invalid(fmt.Sprintf("meta %q", w.key.rid), "a different meta already exists (on_duplicate=raise_error)")
}

// pgMetaRow is the meta table's 14 columns for a meta, in the contract's
// order. Times are the instant in UTC (naive read as UTC), written to
// TIMESTAMP (without time zone) columns. indexed_data is msgspec's JSON of
// the map (datetimes as ISO 8601 strings, bytes as base64, non-finite
// floats as null), SQL NULL when UNSET and JSON null when None. Anything
// Postgres would refuse (NUL or invalid UTF-8 in text, a btree key too
// long, a time out of range) is an *InvalidError.
func pgMetaRow(meta *events.ResourceMeta, encoded []byte) ([]any, error) {
	key := fmt.Sprintf("meta %q", meta.ResourceID)
	texts := []struct {
		name string
		v    string
		max  int
	}{
		{"resource_id", meta.ResourceID, pgMaxIndexed},
		{"created_by", meta.CreatedBy, pgMaxIndexed},
		{"updated_by", meta.UpdatedBy, pgMaxIndexed},
		{"schema_version", meta.SchemaVersion.Value, 0},
		{"rev_status", meta.RevStatus.Value, pgMaxIndexed},
		{"rev_created_by", meta.RevCreatedBy.Value, pgMaxIndexed},
		{"rev_updated_by", meta.RevUpdatedBy.Value, pgMaxIndexed},
	}
	for _, t := range texts {
		if err := pgCheckText(key, t.name, t.v, t.max); err != nil {
			return nil, err
		}
	}
	times := []struct {
		name string
		v    events.Opt[events.Time]
	}{
		{"created_time", events.Some(meta.CreatedTime)},
		{"updated_time", events.Some(meta.UpdatedTime)},
		{"rev_created_time", meta.RevCreatedTime},
		{"rev_updated_time", meta.RevUpdatedTime},
	}
	for _, t := range times {
		if t.v.IsSet() {
			if y := t.v.Value.Instant().Year(); y < 1 || y > 9999 {
				return nil, store.Invalidf(key, "%s %s is outside Python's datetime range (years 1 to 9999)", t.name, t.v.Value.Format())
			}
		}
	}
	var indexed any
	if meta.IndexedData.Present {
		var v events.Value
		if !meta.IndexedData.Null {
			v = meta.IndexedData.Value
			if err := pgCheckValue(key, v, 0); err != nil {
				return nil, err
			}
		}
		b, err := events.EncodeValue(events.JSON, v)
		if err != nil {
			return nil, store.Invalidf(key, "indexed_data cannot be stored as JSON: %v", err)
		}
		indexed = string(b)
	}
	optStr := func(o store.OptString) any {
		if o.IsSet() {
			return o.Value
		}
		return nil
	}
	optTime := func(o events.Opt[events.Time]) any {
		if o.IsSet() {
			return o.Value.Instant()
		}
		return nil
	}
	return []any{
		meta.ResourceID,
		encoded,
		meta.CreatedTime.Instant(),
		meta.UpdatedTime.Instant(),
		meta.CreatedBy,
		meta.UpdatedBy,
		meta.IsDeleted,
		optStr(meta.SchemaVersion),
		indexed,
		optStr(meta.RevStatus),
		optStr(meta.RevCreatedBy),
		optStr(meta.RevUpdatedBy),
		optTime(meta.RevCreatedTime),
		optTime(meta.RevUpdatedTime),
	}, nil
}

// pgCheckText refuses what a Postgres text column cannot hold (NUL,
// invalid UTF-8) and, when max > 0, what a btree index cannot.
func pgCheckText(key, field, s string, max int) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return store.Invalidf(key, "%s contains NUL, which Postgres text cannot hold", field)
	case !utf8.ValidString(s):
		return store.Invalidf(key, "%s is not valid UTF-8", field)
	case max > 0 && len(s) > max:
		return store.Invalidf(key, "%s is %d bytes, more than a Postgres index entry can hold (%d)", field, len(s), max)
	}
	return nil
}

// pgCheckValue refuses strings jsonb cannot hold (NUL, invalid UTF-8)
// anywhere in an indexed_data value.
func pgCheckValue(key string, v events.Value, depth int) error {
	if depth > 1000 {
		return store.Invalid(key, "indexed_data nests too deep")
	}
	switch x := v.(type) {
	case string:
		return pgCheckText(key, "a string in indexed_data", x, 0)
	case []any:
		for _, e := range x {
			if err := pgCheckValue(key, e, depth+1); err != nil {
				return err
			}
		}
	case events.Map:
		for _, it := range x {
			if err := pgCheckValue(key, it.Key, depth+1); err != nil {
				return err
			}
			if err := pgCheckValue(key, it.Value, depth+1); err != nil {
				return err
			}
		}
	case events.Struct:
		for _, f := range x.Fields {
			if err := pgCheckText(key, "a field name in indexed_data", f.Name, 0); err != nil {
				return err
			}
			if err := pgCheckValue(key, f.Value, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *Sink) isSkipped(model, resourceID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.skipped[model][resourceID]
	return ok
}

// ApplyRevision validates a revision and queues it for the next Flush,
// returning Written ("queued"). Flush writes {prefix}resource_data[uid]
// and points the (resource_id, revision_id, schema_version) row of
// {prefix}resource_index at the uid, with the Disk sink's rules: a uid
// stored with other content keeps the newer (a migration beats the
// version it came from, else the later updated_time, else the greater
// info bytes), and a slot naming another uid moves only to a newer
// revision. Without Revisions it returns Unchanged and does nothing: the
// revisions live in another sink. The model only selects the skip set:
// SpecStar's resource tables are shared by the models of a prefix.
func (p *Sink) ApplyRevision(ctx context.Context, model string, res *events.RawResource) (store.Outcome, error) {
	if err := p.check(ctx); err != nil {
		return 0, err
	}
	if !p.opts.Revisions {
		return store.Unchanged, nil
	}
	if res == nil {
		return 0, store.Invalid("revision", "nil")
	}
	info := &res.Info
	if _, err := p.metaTable(model); err != nil {
		return 0, err
	}
	if err := store.CheckUID(info.UID); err != nil {
		return 0, err
	}
	key := fmt.Sprintf("revision %q", info.UID)
	if info.ResourceID == "" {
		return 0, store.Invalid(key, "empty resource_id")
	}
	if info.RevisionID == "" {
		return 0, store.Invalid(key, "empty revision_id")
	}
	sv := pgNoneSchema
	if info.SchemaVersion.IsSet() {
		if info.SchemaVersion.Value == pgNoneSchema {
			return 0, store.Invalidf(key, "schema_version %q is PostgresResourceStore's stand-in for None", pgNoneSchema)
		}
		sv = info.SchemaVersion.Value
	}
	for _, f := range []struct{ name, v string }{
		{"resource_id", info.ResourceID}, {"revision_id", info.RevisionID}, {"schema_version", sv},
	} {
		if err := pgCheckText(key, f.name, f.v, pgMaxIndexed); err != nil {
			return 0, err
		}
	}
	if n := len(info.ResourceID) + len(info.RevisionID) + len(sv); n > pgMaxSlotKey {
		return 0, store.Invalidf(key, "resource_id, revision_id and schema_version are %d bytes together, more than a Postgres index entry can hold (%d)", n, pgMaxSlotKey)
	}
	if p.opts.OnDuplicate == store.DupSkip && p.isSkipped(model, info.ResourceID) {
		return store.Skipped, nil
	}
	infoBytes, err := info.Encode(p.enc)
	if err != nil {
		return 0, store.Invalidf(key, "info cannot be encoded in %v: %v", p.enc, err)
	}
	w := &pgRevWrite{
		info:      *info,
		infoBytes: infoBytes,
		data:      bytes.Clone(res.RawData),
		slot:      pgSlotKey{info.ResourceID, info.RevisionID, sv},
	}
	w.info.Unknown = events.Unknown{}
	if w.data == nil {
		w.data = []byte{} // data is NOT NULL
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, pgWrite{rev: w})
	return store.Written, nil
}

// ApplyBlob reads data to its end and returns Unchanged: SpecStar's
// Postgres stores hold no blobs (its deployments keep them in S3 or on
// disk), so blobs go to a disk or S3 sink configured beside this one.
func (p *Sink) ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (store.Outcome, error) {
	if err := p.check(ctx); err != nil {
		return 0, err
	}
	if data != nil {
		if _, err := io.Copy(io.Discard, store.CtxReader{Ctx: ctx, R: data}); err != nil {
			return 0, fmt.Errorf("sink: postgres: drain blob %q: %w", fileID, err)
		}
	}
	return store.Unchanged, nil
}
