package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
)

// TestWriterLock (issue 33 item 3): writers of one sink's tables share
// them (scale-out), a restore (Exclusive) holds them alone: it is refused
// while a writer has them open, a writer is refused while it holds them,
// each refusal naming the holding session; readers are never refused, and
// closing the holder frees the tables.
func TestWriterLock(t *testing.T) {
	ctx := t.Context()
	opts := Options{TablePrefix: pgtest.Prefix(t), Revisions: true}
	open := func(readOnly bool) (*Sink, error) {
		o := opts
		o.ReadOnly = readOnly
		return Open(ctx, pgTestDSN(), o)
	}
	mustOpen := func(readOnly bool) *Sink {
		t.Helper()
		s, err := open(readOnly)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	refused := func(err error, holder string) bool {
		var le *WriterLockedError
		return errors.As(err, &le) && strings.Contains(le.Holder, holder) && strings.Contains(err.Error(), opts.TablePrefix)
	}

	w1, w2 := mustOpen(false), mustOpen(false) // two runs share the tables
	mustOpen(true)
	if err := w1.Exclusive(ctx); !refused(err, "(writer)") {
		t.Errorf("a restore's Exclusive while another writer has the tables open: %v, want a WriterLockedError naming the writer's session", err)
	}
	w2.Close()
	waitfor.For(t, "the closed writer's session to end", func() bool { return w1.Exclusive(ctx) == nil })

	for _, readOnly := range []bool{false, true} {
		s, err := open(readOnly)
		switch {
		case !readOnly && !refused(err, "(restore, exclusive)"):
			t.Errorf("a writer opening the tables a restore holds: %v, want a WriterLockedError naming the restore's session", err)
		case readOnly && err != nil:
			t.Errorf("a reader opening the tables a restore holds: %v, want it opened", err)
		}
		if err == nil {
			s.Close()
		}
	}
	w1.Close()
	waitfor.For(t, "the restore's session to end", func() bool {
		s, err := open(false)
		if err == nil {
			s.Close()
		}
		return err == nil
	})
}
