package acbak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
)

// Problem is one finding of Verify, tied to a frame.
type Problem struct {
	Frame   int
	Offset  int64
	Warning bool // true: accepted, but worth knowing
	Msg     string
}

func (p Problem) String() string {
	sev := "error"
	if p.Warning {
		sev = "warning"
	}
	return fmt.Sprintf("%s: frame %d at offset %d: %s", sev, p.Frame, p.Offset, p.Msg)
}

// VerifyResult counts what Verify saw.
type VerifyResult struct {
	Frames   int
	Bytes    int64
	Errors   int
	Warnings int
}

// Valid reports whether the archive had no errors.
func (r *VerifyResult) Valid() bool { return r.Errors == 0 }

// Verify checks an archive beyond what the Reader enforces: every record
// and the structs inside Meta and Revision records re-encode to their exact
// bytes; every blob hashes to its file_id and has its declared size; every
// revision's payload hashes to its data_hash (a migrated revision, which
// SpecStar lets keep its pre-migration hash, is a warning); and every
// meta's current revision is present in the archive. Each finding goes to
// report as it is found; memory does not grow with the archive.
//
// The current-revision check relies on SpecStar's order (a meta, then its
// revisions): revisions of the open meta are checked in a constant amount
// of memory, and only records out of that order are remembered.
func Verify(ctx context.Context, in io.Reader, opts Options, report func(Problem), progress ProgressFunc) (*VerifyResult, error) {
	r := NewReader(in, opts)
	res := &VerifyResult{}
	emit := func(f *Frame, warning bool, format string, args ...any) {
		p := Problem{Warning: warning, Msg: fmt.Sprintf(format, args...)}
		if f != nil {
			p.Frame, p.Offset = f.Index, f.Offset
		} else {
			p.Frame, p.Offset = r.Frames(), r.Offset()
		}
		if warning {
			res.Warnings++
		} else {
			res.Errors++
		}
		report(p)
	}
	cur := newCurrentCheck()
	var model string
	for f, err := range r.All() {
		if err != nil {
			var ae *Error
			if errors.As(err, &ae) {
				report(Problem{Frame: ae.Frame, Offset: ae.Offset, Msg: ae.Err.Error()})
				res.Errors++
				break
			}
			return res, err
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if progress != nil && f.Index%1024 == 0 {
			progress(r.Frames(), r.Offset())
		}
		if re, err := f.Record.Encode(events.Msgpack); err != nil {
			emit(f, false, "%s does not re-encode: %v", f.Record.Tag(), err)
		} else if !bytes.Equal(re, f.Payload) {
			emit(f, false, "%s re-encodes to different bytes (not msgspec's canonical form)", f.Record.Tag())
		}
		switch rec := f.Record.(type) {
		case *events.ModelStartRecord:
			model = rec.ModelName
			if err := events.CheckModelName(model); err != nil {
				emit(f, false, "%v", err)
			}
		case *events.ModelEndRecord:
			cur.close(func(rid, want string, at *Frame) {
				emit(at, !opts.RequireCurrent, "model %q: meta %q names current revision %q, which the archive does not hold", model, rid, want)
			})
		case *events.MetaRecord:
			meta, err := rec.Meta()
			if err != nil {
				emit(f, false, "MetaRecord data is not a valid ResourceMeta: %v", err)
				continue
			}
			if re, err := meta.Encode(events.Msgpack); err != nil || !bytes.Equal(re, rec.Data) {
				emit(f, false, "ResourceMeta %q re-encodes to different bytes", meta.ResourceID)
			}
			if err := events.CheckID("resource_id", meta.ResourceID); err != nil {
				emit(f, false, "ResourceMeta: %v", err)
			}
			cur.meta(meta.ResourceID, meta.CurrentRevisionID, f)
		case *events.RevisionRecord:
			raw, err := rec.Resource()
			if err != nil {
				emit(f, false, "RevisionRecord data is not a valid RawResource: %v", err)
				continue
			}
			if re, err := raw.Encode(events.Msgpack); err != nil || !bytes.Equal(re, rec.Data) {
				emit(f, false, "RawResource %q re-encodes to different bytes", raw.Info.RevisionID)
			}
			for _, id := range [][2]string{{"resource_id", raw.Info.ResourceID}, {"revision_id", raw.Info.RevisionID}} {
				if err := events.CheckID(id[0], id[1]); err != nil {
					emit(f, false, "RawResource: %v", err)
				}
			}
			checkDataHash(f, &raw.Info, raw.RawData, emit)
			cur.revision(raw.Info.ResourceID, raw.Info.RevisionID)
		case *events.PurgeRecord:
			if err := events.CheckID("resource_id", rec.ResourceID); err != nil {
				emit(f, false, "PurgeRecord: %v", err)
			}
		case *events.BlobRecord:
			if err := dedup.CheckBlob(rec.FileID, rec.Size, rec.BlobData); err != nil {
				emit(f, false, "%v", err)
			}
		}
	}
	cur.close(func(rid, want string, at *Frame) {
		emit(at, !opts.RequireCurrent, "model %q: meta %q names current revision %q, which the archive does not hold", model, rid, want)
	})
	for _, w := range r.Warnings() {
		report(Problem{Frame: w.Frame, Offset: w.Offset, Warning: true, Msg: w.Err.Error()})
		res.Warnings++
	}
	res.Frames, res.Bytes = r.Frames(), r.Offset()
	return res, nil
}

// checkDataHash compares a revision's data_hash with its payload. SpecStar's
// migrate() re-encodes a revision at a new schema version but keeps the old
// hash (fixtures README 3.6), so a mismatch on a revision whose
// parent_schema_version differs from its schema_version is a warning.
func checkDataHash(f *Frame, info *events.RevisionInfo, payload []byte, emit func(*Frame, bool, string, ...any)) {
	if !info.DataHash.IsSet() {
		return
	}
	err := dedup.CheckDataHash(info.DataHash.Value, payload)
	if err == nil {
		return
	}
	if info.Migrated() {
		emit(f, true, "revision %q: %v (migrated from schema %q to %q, which keeps the old hash)",
			info.RevisionID, err, info.ParentSchemaVersion.Value, info.SchemaVersion.Value)
		return
	}
	emit(f, false, "revision %q: %v", info.RevisionID, err)
}

// currentCheck verifies that each meta's current_revision_id appears among
// the archive's revisions of that resource.
type currentCheck struct {
	openRID, openWant string
	openFrame         *Frame
	openFound         bool
	// Out-of-order leftovers: metas not yet satisfied, and revisions seen
	// for resources other than the open meta's. Empty for SpecStar's order.
	pending map[[2]string]*Frame // (resource_id, revision_id) -> where the meta is (no payload)
	strays  map[[2]string]bool
}

func newCurrentCheck() *currentCheck {
	return &currentCheck{pending: map[[2]string]*Frame{}, strays: map[[2]string]bool{}}
}

func (c *currentCheck) flushOpen() {
	if c.openFrame != nil && !c.openFound {
		key := [2]string{c.openRID, c.openWant}
		if c.strays[key] {
			delete(c.strays, key)
		} else {
			c.pending[key] = c.openFrame
		}
	}
	c.openFrame = nil
}

func (c *currentCheck) meta(rid, want string, f *Frame) {
	c.flushOpen()
	// Only where the meta is, for the report: holding its payload and
	// record until the revision comes made memory grow with the archive.
	at := &Frame{Index: f.Index, Offset: f.Offset}
	c.openRID, c.openWant, c.openFrame, c.openFound = rid, want, at, false
}

func (c *currentCheck) revision(rid, revID string) {
	if c.openFrame != nil && rid == c.openRID {
		if revID == c.openWant {
			c.openFound = true
		}
		return
	}
	key := [2]string{rid, revID}
	if _, ok := c.pending[key]; ok {
		delete(c.pending, key)
		return
	}
	c.strays[key] = true
}

// close ends a model section: what is still pending is missing. Strays are
// kept per section only.
func (c *currentCheck) close(missing func(rid, want string, at *Frame)) {
	c.flushOpen()
	for key, f := range c.pending {
		missing(key[0], key[1], f)
	}
	clear(c.pending)
	clear(c.strays)
}
