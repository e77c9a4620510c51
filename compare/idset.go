package compare

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // pure-Go SQLite driver "sqlite"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source"
)

// idSetBatch is how many (model, resource_id) pairs idSet buffers before
// inserting them in one transaction, and how many ids one membership query
// asks about.
const idSetBatch = 500

// idSet is an on-disk set of (model, resource_id) pairs: what the source
// holds, recorded while reconcile streams it, so that --prune can ask
// whether the source holds a resource of the sink with memory that does
// not grow with the number of resources (a SQLite file in a temporary
// directory, removed by Close; its size is about 50 bytes plus the ids per
// resource).
type idSet struct {
	dir     string
	db      *sql.DB
	pending []idPair
	last    idPair         // the pair added last: a resource's records are usually together
	models  map[string]int // resources per model (models are few)
}

type idPair struct{ model, rid string }

// newIDSet creates an empty set in a new temporary directory below tmp
// ("" is the system's).
func newIDSet(ctx context.Context, tmp string) (*idSet, error) {
	dir, err := os.MkdirTemp(tmp, "replicator-reconcile-*")
	if err != nil {
		return nil, fmt.Errorf("source index: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(OFF)")
	q.Add("_pragma", "synchronous(OFF)")
	q.Add("_pragma", "temp_store(FILE)")
	path := filepath.Join(dir, "source-ids.db")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("source index %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE ids (model TEXT NOT NULL, rid TEXT NOT NULL, PRIMARY KEY (model, rid)) WITHOUT ROWID`); err != nil {
		db.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("source index %s: %w", path, err)
	}
	return &idSet{dir: dir, db: db, models: map[string]int{}}, nil
}

// Add records that the source holds a resource.
func (s *idSet) Add(ctx context.Context, model, rid string) error {
	p := idPair{model, rid}
	if p == s.last {
		return nil
	}
	s.last = p
	s.pending = append(s.pending, p)
	if len(s.pending) >= idSetBatch {
		return s.flush(ctx)
	}
	return nil
}

// flush inserts the buffered pairs in one transaction.
func (s *idSet) flush(ctx context.Context) error {
	if len(s.pending) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("source index: %w", err)
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO ids (model, rid) VALUES (?, ?)`)
	if err != nil {
		return fmt.Errorf("source index: %w", err)
	}
	defer st.Close()
	for _, p := range s.pending {
		res, err := st.ExecContext(ctx, p.model, p.rid)
		if err != nil {
			return fmt.Errorf("source index: model %q resource %q: %w", p.model, p.rid, err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 1 {
			s.models[p.model]++
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("source index: %w", err)
	}
	s.pending = s.pending[:0]
	return nil
}

// Resources is how many resources of model the source holds.
func (s *idSet) Resources(ctx context.Context, model string) (int, error) {
	if err := s.flush(ctx); err != nil {
		return 0, err
	}
	return s.models[model], nil
}

// Holds returns the ids of rids (at most idSetBatch of them) that the
// source holds for model.
func (s *idSet) Holds(ctx context.Context, model string, rids []string) (map[string]bool, error) {
	if err := s.flush(ctx); err != nil {
		return nil, err
	}
	held := map[string]bool{}
	if len(rids) == 0 {
		return held, nil
	}
	args := make([]any, 0, len(rids)+1)
	args = append(args, model)
	for _, r := range rids {
		args = append(args, r)
	}
	q := `SELECT rid FROM ids WHERE model = ? AND rid IN (?` + strings.Repeat(", ?", len(rids)-1) + `)`
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("source index: model %q: %w", model, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, fmt.Errorf("source index: model %q: %w", model, err)
		}
		held[r] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("source index: model %q: %w", model, err)
	}
	return held, nil
}

// Close removes the set and its directory.
func (s *idSet) Close() error {
	err := s.db.Close()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// SourceIndex is what Prune learns from Reconcile: the resources the
// source holds, in an on-disk set, and the newest updated_time among its
// metas and revisions (its horizon: a sink meta updated later may be a
// change the source's read began too early to see, so it is not pruned).
type SourceIndex struct {
	ids    *idSet
	newest time.Time
}

// NewSourceIndex creates an empty index in a new temporary directory
// below tmp ("" is the system's); Close removes it.
func NewSourceIndex(ctx context.Context, tmp string) (*SourceIndex, error) {
	ids, err := newIDSet(ctx, tmp)
	if err != nil {
		return nil, err
	}
	return &SourceIndex{ids: ids}, nil
}

// Close removes the index and its directory.
func (s *SourceIndex) Close() error { return s.ids.Close() }

// record adds the resource of a source meta or revision; a record that
// does not decode names no resource and is skipped (Reconcile reports
// it).
func (s *SourceIndex) record(ctx context.Context, rr source.Record) error {
	var (
		rid     string
		updated time.Time
	)
	switch rec := rr.Record.(type) {
	case *events.MetaRecord:
		m, err := rec.Meta()
		if err != nil {
			return nil
		}
		rid, updated = m.ResourceID, m.UpdatedTime.Instant()
	case *events.RevisionRecord:
		r, err := rec.Resource()
		if err != nil {
			return nil
		}
		rid, updated = r.Info.ResourceID, r.Info.UpdatedTime.Instant()
	default:
		return nil
	}
	if updated.After(s.newest) {
		s.newest = updated
	}
	return s.ids.Add(ctx, rr.Model, rid)
}
