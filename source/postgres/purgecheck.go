package postgres

// Purge detection for Poll. Polling reads rows by updated_time and cannot
// see a row that is gone, so every PurgeCheck Poll lists each meta table's
// resource ids (one consistent snapshot, a server-side cursor, byte
// order) and merges that list with the one the previous check wrote to a
// temporary file, plus the ids Poll emitted since: an id in either but not
// in the table now was permanently deleted, and a PurgeRecord is emitted
// for it. Memory holds one page of ids and the ids emitted since the last
// check (a check runs early when they reach maxEmittedIDs); the lists live
// on disk, one file per model.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/events"
)

// DefaultPurgeCheck is how often Poll looks for deleted meta rows when
// PollOptions.PurgeCheck is 0.
const DefaultPurgeCheck = 30 * time.Second

// maxEmittedIDs bounds the ids Poll remembers between two purge checks;
// reaching it runs the check at once.
const maxEmittedIDs = 10_000

// purgeIDPage is how many ids one FETCH of the purge check reads.
const purgeIDPage = 1000

// purgeCheck is the state of Poll's purge detection.
type purgeCheck struct {
	every   time.Duration
	next    time.Time
	dir     string                         // the id lists, removed by close
	known   map[string]string              // model -> file of the ids the last check listed, in byte order
	emitted map[string]map[string]struct{} // model -> ids emitted since the last check
	n       int                            // ids in emitted
}

func newPurgeCheck(every time.Duration) (*purgeCheck, error) {
	dir, err := os.MkdirTemp("", "specstar-poll-ids-")
	if err != nil {
		return nil, fmt.Errorf("source: postgres purge check: %w", err)
	}
	return &purgeCheck{every: every, dir: dir, known: map[string]string{}, emitted: map[string]map[string]struct{}{}}, nil
}

func (pc *purgeCheck) close() { os.RemoveAll(pc.dir) }

// saw records a resource Poll emitted.
func (pc *purgeCheck) saw(model, rid string) {
	m := pc.emitted[model]
	if m == nil {
		m = map[string]struct{}{}
		pc.emitted[model] = m
	}
	if _, ok := m[rid]; !ok {
		m[rid] = struct{}{}
		pc.n++
	}
}

// due reports whether a check should run now.
func (pc *purgeCheck) due() bool { return pc.n >= maxEmittedIDs || !time.Now().Before(pc.next) }

// run checks every model once and emits a PurgeRecord for each resource
// gone since the last check; it returns how many it emitted. A model
// whose table is gone altogether is forgotten, not purged.
func (s *Source) runPurgeCheck(ctx context.Context, pc *purgeCheck, cur *Cursor,
	emit func(string, events.Record, Cursor) error) (int, error) {
	models, err := s.models(ctx, s.pool)
	if err != nil {
		return 0, err
	}
	total := 0
	current := map[string]bool{}
	for _, model := range models {
		current[model] = true
		n, err := s.purgeCheckModel(ctx, pc, model, cur, emit)
		total += n
		if err != nil {
			return total, err
		}
	}
	for model, file := range pc.known {
		if !current[model] {
			os.Remove(file)
			delete(pc.known, model)
		}
	}
	clear(pc.emitted)
	pc.n = 0
	pc.next = time.Now().Add(pc.every)
	return total, nil
}

func (s *Source) purgeCheckModel(ctx context.Context, pc *purgeCheck, model string, cur *Cursor,
	emit func(string, events.Record, Cursor) error) (int, error) {
	table, err := s.metaTable(model)
	if err != nil {
		return 0, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, fmt.Errorf("source: postgres purge check %s: begin: %w", table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// The snapshot's time: every row missing from it was deleted before.
	var at time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&at); err != nil {
		return 0, fmt.Errorf("source: postgres purge check %s: %w", table, err)
	}
	at = at.UTC()
	if mc := cur.Models[model]; mc != nil && mc.UpdatedTime.After(at) {
		at = mc.UpdatedTime // a writer's clock ahead of the server's: still no older than what was read
	}
	if _, err := tx.Exec(ctx, `DECLARE specstar_purge_ids NO SCROLL CURSOR FOR SELECT resource_id FROM `+ident(table)+
		` ORDER BY resource_id COLLATE "C"`); err != nil {
		return 0, fmt.Errorf("source: postgres purge check %s: %w", table, err)
	}
	next := idPages(ctx, tx, table)

	// Candidates: the previous list and the ids emitted since, in byte order.
	var old *idFile
	if file, ok := pc.known[model]; ok {
		if old, err = openIDFile(file); err != nil {
			return 0, err
		}
		defer old.close()
	}
	emitted := make([]string, 0, len(pc.emitted[model]))
	for rid := range pc.emitted[model] {
		emitted = append(emitted, rid)
	}
	slices.Sort(emitted)
	nextCandidate := func() (string, bool, error) {
		var o string
		var haveOld bool
		if old != nil {
			var err error
			o, haveOld, err = old.peek()
			if err != nil {
				return "", false, err
			}
		}
		switch {
		case !haveOld && len(emitted) == 0:
			return "", false, nil
		case !haveOld || len(emitted) > 0 && emitted[0] < o:
			e := emitted[0]
			emitted = emitted[1:]
			return e, true, nil
		default:
			old.advance()
			if len(emitted) > 0 && emitted[0] == o {
				emitted = emitted[1:]
			}
			return o, true, nil
		}
	}

	out, err := os.CreateTemp(pc.dir, "ids-")
	if err != nil {
		return 0, fmt.Errorf("source: postgres purge check %s: %w", table, err)
	}
	defer func() {
		if out != nil {
			out.Close()
			os.Remove(out.Name())
		}
	}()
	w := bufio.NewWriter(out)
	purged := 0
	cand, haveCand, err := nextCandidate()
	if err != nil {
		return 0, err
	}
	// gone emits the purges of candidates below limit (all, when last).
	gone := func(limit string, last bool) error {
		for haveCand && (last || cand < limit) {
			rec := &events.PurgeRecord{ResourceID: cand, PurgedTime: events.Time{Time: at}}
			if err := emit(model, rec, *cur); err != nil {
				return err
			}
			purged++
			if cand, haveCand, err = nextCandidate(); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		id, ok, err := next()
		if err != nil {
			return purged, err
		}
		if !ok {
			break
		}
		if err := gone(id, false); err != nil {
			return purged, err
		}
		if haveCand && cand == id {
			if cand, haveCand, err = nextCandidate(); err != nil {
				return purged, err
			}
		}
		if err := writeID(w, id); err != nil {
			return purged, fmt.Errorf("source: postgres purge check %s: %w", table, err)
		}
	}
	if err := gone("", true); err != nil {
		return purged, err
	}
	if err := w.Flush(); err != nil {
		return purged, fmt.Errorf("source: postgres purge check %s: %w", table, err)
	}
	if err := out.Close(); err != nil {
		return purged, fmt.Errorf("source: postgres purge check %s: %w", table, err)
	}
	if file, ok := pc.known[model]; ok {
		os.Remove(file)
	}
	pc.known[model] = out.Name()
	out = nil
	return purged, tx.Commit(ctx)
}

// idPages returns the next id of the declared cursor specstar_purge_ids
// at each call (false at the end), fetched purgeIDPage at a time.
func idPages(ctx context.Context, tx pgx.Tx, table string) func() (string, bool, error) {
	var page []string
	done := false
	fetch := fmt.Sprintf("FETCH FORWARD %d FROM specstar_purge_ids", purgeIDPage)
	return func() (string, bool, error) {
		for len(page) == 0 {
			if done {
				return "", false, nil
			}
			rows, err := tx.Query(ctx, fetch)
			if err != nil {
				return "", false, fmt.Errorf("source: postgres purge check %s: %w", table, err)
			}
			if page, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return "", false, fmt.Errorf("source: postgres purge check %s: %w", table, err)
			}
			done = len(page) < purgeIDPage
		}
		id := page[0]
		page = page[1:]
		return id, true, nil
	}
}

// writeID appends one id to a list: its length (uvarint), then its bytes.
func writeID(w *bufio.Writer, id string) error {
	var n [binary.MaxVarintLen64]byte
	if _, err := w.Write(n[:binary.PutUvarint(n[:], uint64(len(id)))]); err != nil {
		return err
	}
	_, err := w.WriteString(id)
	return err
}

// idFile reads a list writeID wrote, one id ahead.
type idFile struct {
	f    *os.File
	r    *bufio.Reader
	cur  string
	have bool
	eof  bool
}

func openIDFile(path string) (*idFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("source: postgres purge check: %w", err)
	}
	return &idFile{f: f, r: bufio.NewReader(f)}, nil
}

// peek returns the next id without consuming it; false at the end.
func (l *idFile) peek() (string, bool, error) {
	if l.have || l.eof {
		return l.cur, l.have, nil
	}
	n, err := binary.ReadUvarint(l.r)
	if errors.Is(err, io.EOF) {
		l.eof = true
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("source: postgres purge check: read %s: %w", filepath.Base(l.f.Name()), err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(l.r, b); err != nil {
		return "", false, fmt.Errorf("source: postgres purge check: read %s: %w", filepath.Base(l.f.Name()), err)
	}
	l.cur, l.have = string(b), true
	return l.cur, true, nil
}

// advance consumes the id peek returned.
func (l *idFile) advance() { l.have = false }

func (l *idFile) close() { l.f.Close() }
