package replicate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// DeadLetteredError is a restore into a tree read and thrown away
// (RestoreTree) that dead-lettered events: the state it holds lacks them.
type DeadLetteredError struct {
	Count            int64
	Stream, Consumer string
}

// Error says how many and where to find them.
func (e *DeadLetteredError) Error() string {
	return fmt.Sprintf("%d events of stream %s could not be restored and were dead-lettered, so the archive would lack them (replicator dlq list --consumer %s); nothing was written", e.Count, e.Stream, e.Consumer)
}

// TreeError is RestoreTree failing to make or open its tree, before
// anything was restored: an operational failure, not the stream's.
type TreeError struct{ Err error }

// Error is Err's.
func (e *TreeError) Error() string { return e.Err.Error() }

// Unwrap is Err.
func (e *TreeError) Unwrap() error { return e.Err }

// RestoreTree restores the stream as of opts' point into a new temporary
// disk tree made beside the path beside (so that what is made of the state
// fits where it goes), for a caller that reads the state and removes the
// tree: `writer export --at`. It returns the tree, to be removed also when
// err is set (dir is "" only when no tree was made), and, as Restore,
// where the restore stopped; a tree it could not make is a *TreeError, a
// dead-lettered event a *DeadLetteredError.
func RestoreTree(ctx context.Context, bus *stream.Bus, beside string, opts RestoreOptions) (dir string, res *RestoreResult, err error) {
	abs, err := filepath.Abs(beside)
	if err != nil {
		return "", nil, &TreeError{err}
	}
	dir, err = os.MkdirTemp(filepath.Dir(abs), ".specstar-export-")
	if err != nil {
		return "", nil, &TreeError{fmt.Errorf("a temporary tree beside %s: %w", beside, err)}
	}
	spec, err := sink.Parse("disk:" + dir)
	if err != nil {
		return dir, nil, &TreeError{err}
	}
	spec.SyncPerBatchUnlessSet() // a tree thrown away afterwards: one syncfs a batch is plenty
	snk, err := spec.Open(ctx)
	if err != nil {
		return dir, nil, &TreeError{err}
	}
	res, err = Restore(ctx, bus, snk, opts)
	if cerr := snk.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close the temporary tree %s: %w", dir, cerr)
	}
	if err == nil && res.DeadLettered > 0 {
		return dir, nil, &DeadLetteredError{Count: res.DeadLettered, Stream: bus.Config().Stream, Consumer: res.Consumer}
	}
	return dir, res, err
}
