package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/source"
)

// Prune is the second pass of `reconcile --prune`, for what only the sink
// holds: during Reconcile every (model, resource_id) the source holds a
// meta or revision of went into a SourceIndex; Prune lists every resource
// whose meta the sink holds (sink.Lister, in pages), checks them against
// the index in batches, and publishes a PurgeRecord for each one the
// source does not hold, at its sink meta's updated_time, so that a sink
// holding a newer version keeps it. Revisions and blobs held without a
// meta are not pruned.

// PruneOptions tune Prune.
type PruneOptions struct {
	// Models are the models to walk, named by the user (a sink URL's
	// models=: all the sink ever consumes); each is pruned even if the
	// source holds none of its resources. Nil walks every model the sink
	// lists, leaving alone those the source holds nothing of.
	Models   []string
	Fix      Publisher         // where purges go; nil is a dry run
	Out      io.Writer         // what is purged or left alone, one line each (nil: counted only)
	Progress func(checked int) // called after every sink resource checked, if set
}

// PruneResult counts what Prune found and did.
type PruneResult struct {
	Models     int // sink models walked
	Checked    int // sink resources checked
	OnlyInSink int // of them, resources the source holds nothing of
	Purges     int // purges published (or, in a dry run, that would be)
	LeftAlone  int // resources only in the sink that are not purged, and models left alone
}

// Prune walks every resource whose meta the sink holds, in the models
// opts names or the sink lists, and publishes through opts.Fix a purge of
// each one the source (idx, filled by Reconcile) holds nothing of: the
// purge removes that version or an older one in every sink consuming the
// stream. Left alone, and reported: a model the source holds nothing of,
// unless named (a Postgres sink's model list may include another
// deployment's tables); a meta updated after the source's newest change
// (the source may have been read before it was made); a meta that cannot
// be read. The result counts what was done even when it fails.
func Prune(ctx context.Context, lister sink.Lister, snk sink.Reader, idx *SourceIndex, opts PruneOptions) (*PruneResult, error) {
	st := &PruneResult{}
	if idx == nil {
		return st, errors.New("prune: no source index (give Reconcile one in ReconcileOptions.Index first)")
	}
	models, named := opts.Models, len(opts.Models) > 0
	if named {
		models = slices.Compact(slices.Sorted(slices.Values(models)))
	} else {
		var err error
		if models, err = lister.Models(ctx); err != nil {
			return st, fmt.Errorf("list models: %w", err)
		}
	}
	p := &pruner{snk: snk, idx: idx, opts: opts, st: st}
	for _, model := range models {
		if err := p.model(ctx, lister, model, named); err != nil {
			return st, err
		}
	}
	return st, nil
}

type pruner struct {
	snk  sink.Reader
	idx  *SourceIndex
	opts PruneOptions
	st   *PruneResult
}

// model prunes one model's resources.
func (p *pruner) model(ctx context.Context, lister sink.Lister, model string, named bool) error {
	st := p.st
	n, err := p.idx.ids.Resources(ctx, model)
	if err != nil {
		return err
	}
	if n == 0 && !named {
		st.LeftAlone++
		writeLine(p.opts.Out, "prune: model %q: the source holds none of its resources: left alone (name it in the sink's models= to prune it)", model)
		return nil
	}
	st.Models++
	batch := make([]string, 0, idSetBatch)
	check := func() error {
		held, err := p.idx.ids.Holds(ctx, model, batch)
		if err != nil {
			return err
		}
		for _, rid := range batch {
			if !held[rid] {
				if err := p.one(ctx, model, rid); err != nil {
					return err
				}
			}
		}
		batch = batch[:0]
		return nil
	}
	for rid, err := range lister.ResourceIDs(ctx, model) {
		if err != nil {
			return fmt.Errorf("model %q: %w", model, err)
		}
		st.Checked++
		if p.opts.Progress != nil {
			p.opts.Progress(st.Checked)
		}
		if batch = append(batch, rid); len(batch) == idSetBatch {
			if err := check(); err != nil {
				return err
			}
		}
	}
	return check()
}

// one handles one resource the source holds nothing of.
func (p *pruner) one(ctx context.Context, model, rid string) error {
	st, out := p.st, p.opts.Out
	meta, err := p.snk.Meta(ctx, model, rid)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // removed since it was listed
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		st.OnlyInSink++
		st.LeftAlone++
		writeLine(out, "prune: model %q resource %q only in the sink, its meta cannot be read (%v): left alone", model, rid, err)
		return nil
	}
	st.OnlyInSink++
	what := fmt.Sprintf("prune: model %q resource %q only in the sink (updated %s, %d revisions)", model, rid, meta.UpdatedTime.Format(), meta.TotalRevisionCount)
	newest := p.idx.newest
	if updated := meta.UpdatedTime.Instant(); newest.IsZero() || updated.After(newest) {
		st.LeftAlone++
		seen := "none"
		if !newest.IsZero() {
			seen = newest.UTC().Format(time.RFC3339Nano)
		}
		writeLine(out, "%s: updated after the source's newest change (%s): left alone", what, seen)
		return nil
	}
	st.Purges++
	if p.opts.Fix == nil {
		writeLine(out, "%s: to purge", what)
		return nil
	}
	rec := &events.PurgeRecord{ResourceID: rid, PurgedTime: meta.UpdatedTime}
	if err := p.opts.Fix.Publish(ctx, source.Record{Model: model, Record: rec, Where: "prune"}); err != nil {
		return fmt.Errorf("model %q resource %q: purge: %w", model, rid, err)
	}
	writeLine(out, "%s: purge published", what)
	return nil
}
