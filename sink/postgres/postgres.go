// Package postgres is the sink backend for a SpecStar Postgres deployment:
// it reads back, lists and purges what it writes, and parses the
// postgres:// sink URL. Its Sink writes what SpecStar's PostgresMetaStore
// and PostgresResourceStore write:
//
//	{prefix}{model}_meta      one row per resource (the contract's meta table; the name is a template)
//	{prefix}resource_data     uid -> payload bytes and RevisionInfo (only with Revisions)
//	{prefix}resource_index    (resource_id, revision_id, schema_version or '__none__') -> uid
//
// Apply validates a record (everything Postgres would refuse is refused
// here, as an *InvalidError, so that no record can make a Flush fail
// forever) and queues it; Flush applies the queue in one transaction.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Options choose the tables and the encoding a Postgres sink
// writes, so that they match the SpecStar deployment that reads them.
type Options struct {
	// Encoding is that of the meta `data` column and the resource `info`
	// column. UNSET (the zero value) means events.Msgpack, what SpecStar's
	// Postgres storage factories write; events.Some(events.JSON) selects
	// JSON. (An Opt rather than a bare events.Encoding because the bare
	// zero value would be JSON.)
	Encoding events.Opt[events.Encoding]
	// MetaTable names a model's meta table; "{model}" is replaced by the
	// model name. "" means "{model}_meta", SpecStar's factory naming.
	// Without "{model}" every model shares one table (right only when one
	// model is replicated: resource ids of different models would collide).
	MetaTable string
	// TablePrefix is SpecStar's table_prefix, put before the meta table
	// and before resource_data / resource_index. Letters, digits and "_".
	TablePrefix string
	// Revisions also stores revisions, in {prefix}resource_data and
	// {prefix}resource_index (a PostgresResourceStore). Off, ApplyRevision
	// ignores revisions (they go to an S3 or disk sink configured beside).
	Revisions bool
	// OnDuplicate is "" (a meta replaces the stored one only if newer, the
	// default), or SpecStar's archive-restore strategies "overwrite",
	// "skip", "raise_error", with the Disk sink's meaning. "skip" and
	// "raise_error" decide at Apply (one read per meta); a different meta
	// that another writer stores between that Apply and the Flush is kept.
	OnDuplicate string
	// ReadOnly opens the sink to read it back (verify): it takes no writer
	// lock, so it neither waits for nor blocks a restore.
	ReadOnly bool
}

// Sink is a sink writing SpecStar's Postgres meta store (and, as an
// option, its Postgres resource store). It is safe for concurrent use:
// Apply calls only validate and queue; Flush writes the queue in one
// transaction whose every write is a compare-and-swap on the row its
// newer-wins decision was taken on, so several replicators may write one
// database at the same time without ever rolling a row back.
//
// An Outcome from ApplyMeta or ApplyRevision is known only as far as it
// can be without the database: Written means "queued" (Flush writes it
// unless the database already holds it or something newer, which makes it
// a no-op there); Skipped and errors are final. Blobs are never held.
type Sink struct {
	pool       *pgxpool.Pool
	opts       Options
	enc        events.Encoding
	metaTmpl   string
	dataTable  string // {prefix}resource_data
	indexTable string // {prefix}resource_index
	rev        *pgRevSQL
	lock       *writerLock // the writer lock's session; nil when ReadOnly
	copyFrom   int         // a round writing this many rows or more uses COPY staging

	// fresh: the last Flush's read found none of the rows it touches
	// (a new sink catching up), so the next one of copyFrom records or
	// more writes without reading first. Guarded by flushMu.
	fresh bool

	tableLocks store.KeyLocks // one schema check per meta table at a time
	flushMu    sync.Mutex     // one Flush at a time
	// roundRefused is what the last round decided not to write (a uid
	// another resource holds); guarded by flushMu.
	roundRefused []store.Refusal

	mu        sync.Mutex
	closed    bool
	queue     []pgWrite                      // applied since the last Seal
	sealed    []pgWrite                      // applied before it, not yet written
	refused   []store.Refusal                // refused by flushes since TakeRefusals
	tables    map[string]*pgMetaSQL          // meta tables checked (or created), by name
	lostRev   bool                           // a Flush found a resource table missing
	firstMeta map[pgMetaKey][]byte           // skip / raise_error: the first meta queued per resource
	skipped   map[string]map[string]struct{} // OnDuplicate "skip": model -> resource ids whose meta was skipped
}

// Open connects to dsn (a libpq URL or key=value string; pool
// settings such as pool_max_conns are accepted) and, with Revisions,
// creates or upgrades the resource tables; meta tables are created or
// upgraded the first time a model is seen. It is the one way to get a
// Postgres. Errors about options are *InvalidError.
func Open(ctx context.Context, dsn string, opts Options) (*Sink, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	enc := events.Msgpack
	if opts.Encoding.Present {
		if opts.Encoding.Null {
			return nil, errors.New("sink: postgres encoding is None (leave it UNSET for msgpack)")
		}
		enc = opts.Encoding.Value
	}
	switch enc {
	case events.JSON, events.Msgpack:
	default:
		return nil, fmt.Errorf("sink: unknown encoding %v", enc)
	}
	switch opts.OnDuplicate {
	case store.DupNewer, store.DupOverwrite, store.DupSkip, store.DupRaise:
	default:
		return nil, fmt.Errorf("sink: unknown on-duplicate strategy %q (want \"\", %q, %q or %q)",
			opts.OnDuplicate, store.DupOverwrite, store.DupSkip, store.DupRaise)
	}
	tmpl := opts.MetaTable
	if tmpl == "" {
		tmpl = "{model}_meta"
	}
	if err := pgCheckConfigName("table prefix", opts.TablePrefix, false); err != nil {
		return nil, err
	}
	if err := pgCheckConfigName("meta table template", tmpl, true); err != nil {
		return nil, err
	}
	if !strings.Contains(tmpl, "{model}") {
		if err := pgCheckTableName(opts.TablePrefix+tmpl, "meta table"); err != nil {
			return nil, err
		}
	}
	p := &Sink{
		opts:       opts,
		enc:        enc,
		metaTmpl:   tmpl,
		dataTable:  opts.TablePrefix + "resource_data",
		indexTable: opts.TablePrefix + "resource_index",
		tables:     map[string]*pgMetaSQL{},
		firstMeta:  map[pgMetaKey][]byte{},
		skipped:    map[string]map[string]struct{}{},
		copyFrom:   pgCopyFrom,
	}
	for _, name := range []string{p.dataTable, p.indexTable} {
		if err := pgCheckTableName(name, "resource table"); err != nil {
			return nil, err
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("sink: postgres connect to %s@%s:%d/%s: %w",
			cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	p.pool = pool
	if opts.Revisions {
		if err := p.dropMarksIfNew(ctx); err != nil {
			pool.Close()
			return nil, err
		}
		if err := pgEnsureResourceTables(ctx, pool, p.dataTable, p.indexTable); err != nil {
			pool.Close()
			return nil, err
		}
	}
	p.rev = newPgRevSQL(p.dataTable, p.indexTable)
	if !opts.ReadOnly {
		if err := p.takeWriterLock(ctx, cfg.ConnConfig); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return p, nil
}

func (p *Sink) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("sink: postgres sink is closed")
	}
	return nil
}

// Close writes what is still queued (giving up after 30 s; what is not
// written was not acknowledged either, so it is redelivered) and closes
// the connection pool. The Postgres cannot be used afterwards.
func (p *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.Flush(ctx)
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.pool.Close()
	p.releaseWriterLock()
	return err
}
