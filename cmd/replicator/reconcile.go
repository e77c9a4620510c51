package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// Reconcile compares a sink with its source of truth and repairs the sink
// by publishing the source's version of every record the sink lacks or
// holds an older version of; `replicator run` then applies them. Without
// --prune it never deletes anything.
//
// Memory does not depend on the size of either store: the source is read
// as a stream (an archive in file order, which is not sorted; a Postgres
// snapshot in (model, resource_id) order) and every source record is
// looked up in the sink point-wise through sink.Reader, as verify does.
//
// --prune adds a second pass for what only the sink holds: during the
// first, every (model, resource_id) the source holds a meta or revision of
// goes into an on-disk set (idSet); then every resource whose meta the
// sink holds is listed (sink.Lister, in pages) and checked against the set
// in batches, and each one the source does not hold gets a PurgeRecord at
// its sink meta's updated_time, so that a sink holding a newer version
// keeps it. Revisions and blobs held without a meta are not pruned.

// reconcileStats counts what reconcile found and did.
type reconcileStats struct {
	Metas, Revisions, Blobs int // source records compared
	Differences             int // every difference reported
	Repairs                 int // differences a published record repairs (or would, with --dry-run)
	Published               struct{ Metas, Revisions, Blobs, Purges int }
	Prune                   pruneStats
}

// repairer publishes the records reconcile decides to send.
type repairer interface {
	repair(ctx context.Context, rr sourceRecord) error
}

// reconcile compares every source record with the sink and hands each
// missing or older one to fix (nil: dry run). Each difference goes to
// report, one line each. seen (nil without --prune) records what the
// source holds.
func reconcile(ctx context.Context, src recordSource, snk sink.Reader, h holds, fix repairer, seen *sourceSeen, report func(string)) (*reconcileStats, error) {
	st := &reconcileStats{}
	diff := func(rr sourceRecord, repair bool, format string, args ...any) error {
		st.Differences++
		action := "left alone"
		if repair {
			st.Repairs++
			action = "to publish"
			if fix != nil {
				action = "published"
			}
		}
		report(fmt.Sprintf("%s: %s: %s", rr.Where, fmt.Sprintf(format, args...), action))
		if !repair || fix == nil {
			return nil
		}
		if err := fix.repair(ctx, rr); err != nil {
			return fmt.Errorf("%s: %w", rr.Where, err)
		}
		switch rr.Record.(type) {
		case *events.MetaRecord:
			st.Published.Metas++
		case *events.RevisionRecord:
			st.Published.Revisions++
		case *events.BlobRecord:
			st.Published.Blobs++
		}
		return nil
	}
	for rr, err := range src.Records(ctx) {
		if err != nil {
			return st, err
		}
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if seen != nil {
			if err := seen.record(ctx, rr); err != nil {
				return st, err
			}
		}
		var derr error
		switch rec := rr.Record.(type) {
		case *events.MetaRecord:
			st.Metas++
			derr = reconcileMeta(ctx, rr, rec, snk, diff)
		case *events.RevisionRecord:
			if !h.revisions {
				continue
			}
			st.Revisions++
			derr = reconcileRevision(ctx, rr, rec, snk, diff)
		case *events.BlobRecord:
			if !h.blobs {
				continue
			}
			st.Blobs++
			derr = reconcileBlob(ctx, rr, rec, snk, diff)
		}
		if derr != nil {
			return st, derr
		}
	}
	return st, nil
}

type diffFunc func(rr sourceRecord, repair bool, format string, args ...any) error

// reconcileMeta: a missing meta, or one older than the source's (earlier
// updated_time, or fewer revisions at the same time), is published; a
// newer one, or one that differs at equal time and count, is reported and
// left alone (the sink keeps the newer meta anyway).
func reconcileMeta(ctx context.Context, rr sourceRecord, rec *events.MetaRecord, snk sink.Reader, diff diffFunc) error {
	want, err := rec.Meta()
	if err != nil {
		return diff(rr, false, "source meta does not decode: %v", err)
	}
	got, err := snk.Meta(ctx, rr.Model, want.ResourceID)
	if errors.Is(err, fs.ErrNotExist) {
		return diff(rr, true, "model %q meta %q missing from the sink", rr.Model, want.ResourceID)
	}
	if err != nil {
		return fmt.Errorf("%s: model %q meta %q: %w", rr.Where, rr.Model, want.ResourceID, err)
	}
	if b, err := got.Encode(events.Msgpack); err == nil && bytes.Equal(b, rec.Data) {
		return nil
	}
	c := got.UpdatedTime.Instant().Compare(want.UpdatedTime.Instant())
	if c == 0 {
		c = cmpInt(got.TotalRevisionCount, want.TotalRevisionCount)
	}
	desc := fmt.Sprintf("sink: updated %s, %d revisions, current %s; source: updated %s, %d revisions, current %s",
		got.UpdatedTime.Format(), got.TotalRevisionCount, got.CurrentRevisionID,
		want.UpdatedTime.Format(), want.TotalRevisionCount, want.CurrentRevisionID)
	switch {
	case c < 0:
		return diff(rr, true, "model %q meta %q older in the sink (%s)", rr.Model, want.ResourceID, desc)
	case c > 0:
		return diff(rr, false, "model %q meta %q newer in the sink (%s)", rr.Model, want.ResourceID, desc)
	default:
		return diff(rr, false, "model %q meta %q differs at equal updated_time and revision count (%s)", rr.Model, want.ResourceID, desc)
	}
}

func schemaVersion(v events.Opt[string]) string {
	if !v.IsSet() {
		return "none"
	}
	return strconv.Quote(v.Value)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// reconcileRevision: a revision missing at (resource_id, revision_id,
// schema_version), or whose data_hash, payload or info bytes differ, is
// published (the sink's own rule decides which version stays).
func reconcileRevision(ctx context.Context, rr sourceRecord, rec *events.RevisionRecord, snk sink.Reader, diff diffFunc) error {
	want, err := rec.Resource()
	if err != nil {
		return diff(rr, false, "source revision does not decode: %v", err)
	}
	wi := want.Info
	info, data, err := snk.Revision(ctx, rr.Model, wi.ResourceID, wi.RevisionID, wi.SchemaVersion)
	if errors.Is(err, fs.ErrNotExist) {
		return diff(rr, true, "model %q resource %q revision %q (schema version %s) missing from the sink", rr.Model, wi.ResourceID, wi.RevisionID, schemaVersion(wi.SchemaVersion))
	}
	if err != nil {
		return fmt.Errorf("%s: model %q revision %q: %w", rr.Where, rr.Model, wi.RevisionID, err)
	}
	switch {
	case info.DataHash != wi.DataHash:
		return diff(rr, true, "model %q resource %q revision %q: data_hash %s in the sink, %s in the source",
			rr.Model, wi.ResourceID, wi.RevisionID, info.DataHash.Value, wi.DataHash.Value)
	case !bytes.Equal(data, want.RawData):
		return diff(rr, true, "model %q resource %q revision %q: payload differs (%d bytes in the sink, %d in the source)",
			rr.Model, wi.ResourceID, wi.RevisionID, len(data), len(want.RawData))
	}
	got := events.RawResource{Info: *info, RawData: data}
	if b, err := got.Encode(events.Msgpack); err != nil || !bytes.Equal(b, rec.Data) {
		return diff(rr, true, "model %q resource %q revision %q: info differs (sink uid %s, source uid %s)",
			rr.Model, wi.ResourceID, wi.RevisionID, info.UID, wi.UID)
	}
	return nil
}

// reconcileBlob: a missing blob is published; a blob file whose bytes do
// not hash to its file_id is reported and left alone (content-addressed
// sinks keep the file they have: remove it, then reconcile again).
func reconcileBlob(ctx context.Context, rr sourceRecord, rec *events.BlobRecord, snk sink.Reader, diff diffFunc) error {
	bin, r, err := snk.OpenBlob(ctx, rec.FileID)
	if errors.Is(err, fs.ErrNotExist) {
		return diff(rr, true, "blob %s missing from the sink", rec.FileID)
	}
	if err != nil {
		return fmt.Errorf("%s: blob %s: %w", rr.Where, rec.FileID, err)
	}
	hs := dedup.NewFileIDHasher()
	n, err := io.Copy(hs, r)
	r.Close()
	switch {
	case err != nil:
		return fmt.Errorf("%s: blob %s: reading it: %w", rr.Where, rec.FileID, err)
	case n != int64(len(rec.BlobData)) || dedup.HexSum(hs) != dedup.FileID(rec.BlobData):
		return diff(rr, false, "blob %s: bytes differ (%d in the sink, %d in the source)", rec.FileID, n, len(rec.BlobData))
	case bin.ContentType.Value != rec.ContentType:
		return diff(rr, false, "blob %s: content type %q in the sink, %q in the source", rec.FileID, bin.ContentType.Value, rec.ContentType)
	}
	return nil
}

// pruneStats counts what the prune pass found and did.
type pruneStats struct {
	Models     int // sink models walked
	Checked    int // sink resources checked
	OnlyInSink int // of them, resources the source holds nothing of
	Purges     int // purges published (or, with --dry-run, that would be)
	LeftAlone  int // resources only in the sink that are not purged, and models left alone
}

// pruneModels are the models the prune pass walks: named (the sink URL's
// models=, all this sink ever consumes) or listed.
func pruneModels(ctx context.Context, lister sink.Lister, named []string) ([]string, bool, error) {
	if len(named) > 0 {
		return slices.Compact(slices.Sorted(slices.Values(named))), true, nil
	}
	models, err := lister.Models(ctx)
	return models, false, err
}

// prunePass walks every resource whose meta the sink holds, in the given
// models, and publishes through fix (nil: dry run) a purge of each one the
// source holds nothing of, at its sink meta's updated_time: the purge
// removes that version or an older one in every sink consuming the
// stream, and a sink holding a newer meta keeps it. Left alone, and
// reported: a model the source holds nothing of, unless named (without a
// prefix, a Postgres sink's model list may include another deployment's
// tables); a meta updated after the source's newest change (the source
// may have been read before it was made); a meta that cannot be read.
func prunePass(ctx context.Context, lister sink.Lister, snk sink.Reader, models []string, named bool, seen *sourceSeen,
	fix repairer, st *pruneStats, tick func(checked int), report func(string)) error {
	for _, model := range models {
		n, err := seen.ids.Resources(ctx, model)
		if err != nil {
			return err
		}
		if n == 0 && !named {
			st.LeftAlone++
			report(fmt.Sprintf("prune: model %q: the source holds none of its resources: left alone (name it in the sink's models= to prune it)", model))
			continue
		}
		st.Models++
		batch := make([]string, 0, idSetBatch)
		check := func() error {
			held, err := seen.ids.Holds(ctx, model, batch)
			if err != nil {
				return err
			}
			for _, rid := range batch {
				if !held[rid] {
					if err := pruneOne(ctx, snk, model, rid, seen, fix, st, report); err != nil {
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
			tick(st.Checked)
			if batch = append(batch, rid); len(batch) == idSetBatch {
				if err := check(); err != nil {
					return err
				}
			}
		}
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// pruneOne handles one resource the source holds nothing of.
func pruneOne(ctx context.Context, snk sink.Reader, model, rid string, seen *sourceSeen, fix repairer, st *pruneStats, report func(string)) error {
	meta, err := snk.Meta(ctx, model, rid)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // removed since it was listed
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		st.OnlyInSink++
		st.LeftAlone++
		report(fmt.Sprintf("prune: model %q resource %q only in the sink, its meta cannot be read (%v): left alone", model, rid, err))
		return nil
	}
	st.OnlyInSink++
	what := fmt.Sprintf("prune: model %q resource %q only in the sink (updated %s, %d revisions)", model, rid, meta.UpdatedTime.Format(), meta.TotalRevisionCount)
	if updated := meta.UpdatedTime.Instant(); seen.newest.IsZero() || updated.After(seen.newest) {
		st.LeftAlone++
		newest := "none"
		if !seen.newest.IsZero() {
			newest = seen.newest.UTC().Format(time.RFC3339Nano)
		}
		report(fmt.Sprintf("%s: updated after the source's newest change (%s): left alone", what, newest))
		return nil
	}
	st.Purges++
	if fix == nil {
		report(what + ": to purge")
		return nil
	}
	rec := &events.PurgeRecord{ResourceID: rid, PurgedTime: meta.UpdatedTime}
	if err := fix.repair(ctx, sourceRecord{Model: model, Record: rec, Where: "prune"}); err != nil {
		return fmt.Errorf("model %q resource %q: purge: %w", model, rid, err)
	}
	report(what + ": purge published")
	return nil
}

// busRepairer publishes repairs onto the event stream.
type busRepairer struct {
	bus *stream.Bus
	pub *stream.Publisher
	// suffix makes this run's message ids new: the records reconcile sends
	// were usually published before, and within the duplicate window
	// JetStream would drop them as duplicates (a purge does not forget
	// message ids). The sinks are idempotent, so a record delivered twice
	// is harmless.
	suffix string
}

func (b *busRepairer) repair(ctx context.Context, rr sourceRecord) error {
	rec, payload := rr.Record, rr.Payload
	if blob, ok := rec.(*events.BlobRecord); ok {
		size := len(payload)
		if payload == nil {
			size = len(blob.BlobData) // re-encoded: at least this large
		}
		if !b.pub.FitsInline(size) {
			if err := b.pub.PutBlob(ctx, blob.FileID, blob.BlobData); err != nil {
				return err
			}
			rec = &events.BlobRefRecord{FileID: blob.FileID, Size: blob.Size, ContentType: blob.ContentType, Bucket: b.bus.BlobBucket()}
			payload = nil
		}
	}
	env, err := events.EnvelopeFor(b.bus.Prefix(), rr.Model, rec, payload)
	if err != nil {
		return err
	}
	env.Headers[events.HeaderMsgID] += b.suffix
	if err := b.pub.Publish(ctx, env); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	var bf busFlags
	bf.register(fs)
	var ca comparisonArgs
	ca.register(fs)
	dryRun := fs.Bool("dry-run", false, "report the differences, publish nothing")
	prune := fs.Bool("prune", false, "also purge resources only the sink holds (their metas, and revisions up to the meta's time; not blobs); "+
		"the purges go onto the shared stream, so EVERY sink consuming it removes those resources too")
	pos, ok := parse(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if len(pos) != 0 || !ca.usable() {
		fmt.Fprintln(stderr, "replicator reconcile: want --archive ARCHIVE or --source DEPLOYMENT, and --sink URL")
		return exitUsage
	}
	cs, code := openCompared(ctx, "reconcile", ca, fs, stderr, log)
	if code != exitOK {
		return code
	}
	defer cs.Close()
	spec, reader, src, from, meter := cs.spec, cs.reader, cs.src, cs.from, cs.meter

	var (
		lister sink.Lister
		seen   *sourceSeen
	)
	if *prune {
		if lister, ok = cs.sink.(sink.Lister); !ok {
			fmt.Fprintf(stderr, "replicator reconcile: sink %s cannot be listed: --prune is not available for it\n", spec.Raw)
			return exitFailed
		}
		ids, err := newIDSet(ctx, "")
		if err != nil {
			fmt.Fprintf(stderr, "replicator reconcile: %v\n", err)
			return exitFailed
		}
		defer ids.Close()
		seen = &sourceSeen{ids: ids}
	}

	var fix *busRepairer
	if !*dryRun {
		bus, err := stream.Open(ctx, bf.cfg, log)
		if err != nil {
			fmt.Fprintf(stderr, "replicator reconcile: %v\n", err)
			return exitFailed
		}
		defer bus.Close()
		fix = &busRepairer{bus: bus, pub: bus.NewPublisher(256), suffix: "-reconcile-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	}

	var rep repairer
	if fix != nil {
		rep = fix
	}
	report := func(line string) { fmt.Fprintln(stdout, line) }
	st, err := reconcile(ctx, src, reader, holdsOf(spec), rep, seen, report)
	meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "replicator reconcile: %s: %v\n", from, err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "%s vs %s: %d metas, %d revisions, %d blobs compared, %d differences, %d to repair\n",
		from, spec.Raw, st.Metas, st.Revisions, st.Blobs, st.Differences, st.Repairs)
	var perr error
	if *prune {
		pmeter := progress.New("reconcile --prune "+spec.Raw, 0, log)
		var (
			models []string
			named  bool
		)
		if models, named, perr = pruneModels(ctx, lister, spec.Models); perr == nil {
			perr = prunePass(ctx, lister, reader, models, named, seen, rep, &st.Prune, func(n int) { pmeter.Update(int64(n), 0) }, report)
		}
		pmeter.Done()
		if fix != nil {
			st.Published.Purges = st.Prune.Purges
		}
	}
	if fix != nil {
		// What was published before a failed prune pass is sent all the same.
		if ferr := fix.pub.Flush(ctx); ferr != nil {
			fmt.Fprintf(stderr, "replicator reconcile: flush: %v\n", ferr)
			return exitFailed
		}
	}
	if perr != nil {
		fmt.Fprintf(stderr, "replicator reconcile: --prune: sink %s: %v\n", spec.Raw, perr)
		return exitFailed
	}
	if *prune {
		p := st.Prune
		fmt.Fprintf(stdout, "prune: %d sink resources checked in %d models, %d only in the sink, %d to purge, %d left alone\n",
			p.Checked, p.Models, p.OnlyInSink, p.Purges, p.LeftAlone)
	}
	if fix == nil {
		fmt.Fprintf(stdout, "dry run: 0 records published\n")
		return exitOK
	}
	pub := st.Published
	published := pub.Metas + pub.Revisions + pub.Blobs + pub.Purges
	then := ""
	if published > 0 {
		then = "; `replicator run` applies them"
	}
	purges := ""
	if *prune {
		purges = fmt.Sprintf(", %d purges", pub.Purges)
	}
	fmt.Fprintf(stdout, "%d records published (%d metas, %d revisions, %d blobs%s; %d dropped as duplicates)%s\n",
		published, pub.Metas, pub.Revisions, pub.Blobs, purges, fix.pub.Stats.Duplicates, then)
	return exitOK
}
