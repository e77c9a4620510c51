package postgres

// One writer lock per sink's tables, as the disk sink has one per tree:
// a session-level advisory lock on a connection of its own, held while
// the sink is open. Writers (run, mirror, reconcile) hold it shared, so
// several of them may write one database at once (scale-out); a restore
// takes it exclusively (Exclusive), so that no run writes a later state
// into what it claims is the state as of its point, and no run starts
// while it restores. The server releases it when the holder's session
// ends, so a killed writer never blocks the next one.

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// WriterLockedError is the refusal of a sink whose tables another session
// holds the writer lock of in a conflicting mode: a restore while a
// writer has them open, or a writer while a restore does.
type WriterLockedError struct {
	Tables string // the table prefix's tables, for messages
	Holder string // the holding session: pid, application name, client, since when
}

func (e *WriterLockedError) Error() string {
	return fmt.Sprintf("sink: postgres tables %s are held by another process (%s): a restore holds them alone, and no restore starts while a writer has them open; stop the other one, or restore into other tables", e.Tables, e.Holder)
}

// writerLock is the lock's connection and key.
type writerLock struct {
	conn *pgx.Conn
	key  int64
}

// tablesName names the sink's tables for messages.
func (p *Sink) tablesName() string { return p.opts.TablePrefix + "*" }

// takeWriterLock connects a session of its own to cfg's database and
// takes the writer lock of the sink's tables shared.
func (p *Sink) takeWriterLock(ctx context.Context, cfg *pgx.ConnConfig) error {
	cfg = cfg.Copy()
	host, _ := os.Hostname()
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("specstar-replicator on %s pid %d (writer)", host, os.Getpid())
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("sink: postgres writer lock of tables %s: connect: %w", p.tablesName(), err)
	}
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		conn.Close(ctx)
		return fmt.Errorf("sink: postgres writer lock of tables %s: %w", p.tablesName(), err)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "specstar-replicator writer\x00%s\x00%s", schema, p.opts.TablePrefix)
	p.lock = &writerLock{conn: conn, key: int64(h.Sum64())}
	if err := p.tryLock(ctx, "pg_try_advisory_lock_shared"); err != nil {
		conn.Close(ctx)
		p.lock = nil
		return err
	}
	return nil
}

// Exclusive holds the sink's tables for the caller alone (a restore): it
// fails with a *WriterLockedError while another session has them open
// for writing, and from then on every other writer's Open fails so.
func (p *Sink) Exclusive(ctx context.Context) error {
	if p.lock == nil {
		return fmt.Errorf("sink: postgres tables %s: opened to read back, it holds no writer lock", p.tablesName())
	}
	// A session's own shared lock does not conflict with its request.
	if err := p.tryLock(ctx, "pg_try_advisory_lock"); err != nil {
		return err
	}
	if _, err := p.lock.conn.Exec(ctx, "SELECT pg_advisory_unlock_shared($1)", p.lock.key); err != nil {
		return fmt.Errorf("sink: postgres writer lock of tables %s: %w", p.tablesName(), err)
	}
	_, err := p.lock.conn.Exec(ctx, "SELECT set_config('application_name', replace(current_setting('application_name'), '(writer)', '(restore, exclusive)'), false)")
	if err != nil {
		return fmt.Errorf("sink: postgres writer lock of tables %s: %w", p.tablesName(), err)
	}
	return nil
}

// tryLock calls fn, pg_try_advisory_lock or its _shared form, on the
// lock's key; false is a *WriterLockedError naming a holder.
func (p *Sink) tryLock(ctx context.Context, fn string) error {
	var ok bool
	if err := p.lock.conn.QueryRow(ctx, "SELECT "+fn+"($1)", p.lock.key).Scan(&ok); err != nil {
		return fmt.Errorf("sink: postgres writer lock of tables %s: %w", p.tablesName(), err)
	}
	if ok {
		return nil
	}
	return &WriterLockedError{Tables: p.tablesName(), Holder: p.lockHolder(ctx)}
}

// lockHolder describes another session holding the lock's key, for the
// refusal.
func (p *Sink) lockHolder(ctx context.Context) string {
	var (
		pid        int32
		app, addr  string
		mode       string
		connSince  time.Time
		key        = uint64(p.lock.key)
		classid    = int64(key >> 32)
		objid      = int64(key & 0xffffffff)
		holderDesc = "another session"
	)
	err := p.lock.conn.QueryRow(ctx, `SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'), a.backend_start, l.mode
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1
		ORDER BY a.backend_start LIMIT 1`, classid, objid).Scan(&pid, &app, &addr, &connSince, &mode)
	if err != nil {
		return holderDesc
	}
	return fmt.Sprintf("session pid %d %q from %s, connected since %s, holds %s", pid, app, addr, connSince.UTC().Format(time.RFC3339), mode)
}

// releaseWriterLock ends the lock's session, which releases the lock.
func (p *Sink) releaseWriterLock() {
	if p.lock == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.lock.conn.Close(ctx)
	p.lock = nil
}
