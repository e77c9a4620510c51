package sinktest

// What the suite checks after applying: outcomes, what reads back, blobs
// and listings.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
)

// apply applies recs in order, failing the test on an error, and returns
// the outcomes.
func (s *suite) applyAll(t *testing.T, snk sink.Sink, recs []record) []sink.Outcome {
	t.Helper()
	outs := make([]sink.Outcome, len(recs))
	for i, r := range recs {
		out, err := applyOne(snk, r)
		if err != nil {
			t.Fatalf("apply %s: %v", describe(r), err)
		}
		outs[i] = out
	}
	return outs
}

func applyOne(snk sink.Sink, r record) (sink.Outcome, error) {
	switch {
	case r.Meta != nil:
		return snk.ApplyMeta(ctx, r.Model, r.Meta)
	case r.Rev != nil:
		return snk.ApplyRevision(ctx, r.Model, r.Rev)
	default:
		b := r.Blob
		return snk.ApplyBlob(ctx, b.FileID, b.Size, b.ContentType, bytes.NewReader(b.BlobData))
	}
}

func flush(t *testing.T, snk sink.Sink) {
	t.Helper()
	if err := snk.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// checkOutcomes checks the outcomes of applying recs: a kind not held is
// Skipped or Unchanged; a held kind is one of want (or Written, if the
// backend is Queued).
func (s *suite) checkOutcomes(t *testing.T, recs []record, outs []sink.Outcome, want ...sink.Outcome) {
	t.Helper()
	bad := 0
	for i, r := range recs {
		out := outs[i]
		var ok bool
		switch {
		case !s.held(r):
			ok = out == sink.Skipped || out == sink.Unchanged
		default:
			ok = slices.Contains(want, out) || s.b.Queued && out == sink.Written
		}
		if !ok {
			if bad++; bad <= 10 {
				t.Errorf("%s: outcome %v (held: %v), want one of %v", describe(r), out, s.held(r), want)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d wrong outcomes in all", bad)
	}
}

// readBack reads every record of want back and compares it with the
// archive, byte for byte; a record of a kind not held must read as
// missing.
func (s *suite) readBack(t *testing.T, snk sink.Sink, want []record) {
	t.Helper()
	rd := reader(t, snk)
	bad := 0
	for _, r := range want {
		err := s.readOne(rd, r)
		if err != nil {
			if bad++; bad <= 10 {
				t.Errorf("read back %s: %v", describe(r), err)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d records read back wrong in all", bad)
	}
}

// errDiffers says a record read back is not the one applied.
var errDiffers = errors.New("differs from the archive")

// readOne reads r back: nil if it reads as applied (or, for a kind not
// held, as missing); an error wrapping fs.ErrNotExist if it is missing;
// another error (errDiffers when it is there but different) otherwise.
func (s *suite) readOne(rd sink.Reader, r record) error {
	got, err := readRaw(rd, r)
	if !s.held(r) {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("a kind the backend does not hold reads as %v, want an error wrapping fs.ErrNotExist", err)
	}
	if err != nil {
		return err
	}
	if r.Blob != nil {
		return checkBlob(r.Blob, got)
	}
	if !bytes.Equal(got.raw, r.Raw) {
		return errDiffers
	}
	return nil
}

// readResult is a record read back: the msgpack encoding of a meta or of
// a revision (info and payload), or a blob.
type readResult struct {
	raw  []byte
	bin  *events.Binary
	data []byte
}

func readRaw(rd sink.Reader, r record) (readResult, error) {
	switch {
	case r.Meta != nil:
		m, err := rd.Meta(ctx, r.Model, r.Meta.ResourceID)
		if err != nil {
			return readResult{}, err
		}
		b, err := m.Encode(events.Msgpack)
		if err != nil {
			return readResult{}, fmt.Errorf("encode the meta read back: %w", err)
		}
		return readResult{raw: b}, nil
	case r.Rev != nil:
		in := r.Rev.Info
		info, data, err := rd.Revision(ctx, r.Model, in.ResourceID, in.RevisionID, in.SchemaVersion)
		if err != nil {
			return readResult{}, err
		}
		b, err := (&events.RawResource{Info: *info, RawData: data}).Encode(events.Msgpack)
		if err != nil {
			return readResult{}, fmt.Errorf("encode the revision read back: %w", err)
		}
		return readResult{raw: b}, nil
	default:
		bin, rc, err := rd.OpenBlob(ctx, r.Blob.FileID)
		if err != nil {
			return readResult{}, err
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		if err != nil {
			return readResult{}, fmt.Errorf("read the blob: %w", err)
		}
		return readResult{bin: bin, data: data}, nil
	}
}

// checkBlob compares a blob read back with the one applied: bytes, size
// and content type (a Binary without one and one with "" are the same).
func checkBlob(b *events.BlobRecord, got readResult) error {
	bin := got.bin
	switch {
	case bin.FileID.Value != b.FileID:
		return fmt.Errorf("file_id %q: %w", bin.FileID.Value, errDiffers)
	case !bin.Size.IsSet() || bin.Size.Value != b.Size:
		return fmt.Errorf("size %+v, want %d: %w", bin.Size, b.Size, errDiffers)
	case bin.ContentType.Value != b.ContentType:
		return fmt.Errorf("content type %q, want %q: %w", bin.ContentType.Value, b.ContentType, errDiffers)
	case bin.Data.Present:
		return fmt.Errorf("the Binary read back carries its data (the bytes come from the reader): %w", errDiffers)
	case !bytes.Equal(got.data, b.BlobData):
		return fmt.Errorf("%d bytes read, want %d: %w", len(got.data), len(b.BlobData), errDiffers)
	}
	return nil
}

// listing returns what the sink lists (model -> ids), or nil if it is no
// sink.Lister.
func listing(t *testing.T, snk sink.Sink) map[string][]string {
	t.Helper()
	ls, ok := snk.(sink.Lister)
	if !ok {
		return nil
	}
	models, err := ls.Models(ctx)
	if err != nil {
		t.Fatalf("Models: %v", err)
	}
	out := map[string][]string{}
	for _, m := range models {
		ids := []string{}
		for id, err := range ls.ResourceIDs(ctx, m) {
			if err != nil {
				t.Fatalf("ResourceIDs(%q): %v", m, err)
			}
			ids = append(ids, id)
		}
		out[m] = ids
	}
	if len(models) != len(out) {
		t.Errorf("Models lists a model twice: %q", models)
	}
	if !slices.IsSorted(models) {
		t.Errorf("Models not in byte order: %q", models)
	}
	return out
}

// wantListing is what a Lister holding recs lists: the resources with a
// meta (or, for a backend without metas, with a revision), ids in byte
// order.
func (s *suite) wantListing(recs []record) map[string][]string {
	seen := map[string]map[string]bool{}
	for _, r := range recs {
		var rid string
		switch {
		case r.Meta != nil && s.b.Metas:
			rid = r.Meta.ResourceID
		case r.Rev != nil && !s.b.Metas && s.b.Revisions:
			rid = r.Rev.Info.ResourceID
		default:
			continue
		}
		if seen[r.Model] == nil {
			seen[r.Model] = map[string]bool{}
		}
		seen[r.Model][rid] = true
	}
	out := map[string][]string{}
	for m, ids := range seen {
		l := make([]string, 0, len(ids))
		for id := range ids {
			l = append(l, id)
		}
		slices.Sort(l) // byte order
		out[m] = l
	}
	return out
}

// checkListing compares what the sink lists with what recs put there, if
// the sink is a Lister.
func (s *suite) checkListing(t *testing.T, snk sink.Sink, recs []record) {
	t.Helper()
	got := listing(t, snk)
	if got == nil {
		return
	}
	if want := s.wantListing(recs); !reflect.DeepEqual(got, want) {
		t.Errorf("listing:\n got %s\nwant %s", summarize(got), summarize(want))
	}
}

// summarize prints a listing shortly.
func summarize(l map[string][]string) string {
	var models []string
	for m := range l {
		models = append(models, m)
	}
	slices.Sort(models)
	var b strings.Builder
	for _, m := range models {
		ids := l[m]
		if len(ids) > 6 {
			ids = append(slices.Clone(ids[:6]), fmt.Sprintf("... (%d)", len(ids)))
		}
		fmt.Fprintf(&b, "%s: %q; ", m, ids)
	}
	return b.String()
}
