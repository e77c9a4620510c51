// Package acbak reads and writes SpecStar's .acbak backup archives: frames
// of a 4-byte big-endian length and a msgpack DumpRecord, in the order the
// storage contract fixes (Header, then model sections, then Eof).
package acbak

import (
	"errors"
	"fmt"

	"github.com/specstar/replicator/events"
)

// Kinds of archive problems; every *Error wraps exactly one of them (or a
// record decode error), so callers can tell them apart with errors.Is.
var (
	ErrEmpty              = errors.New("empty archive: no HeaderRecord")
	ErrNotArchive         = errors.New("not an .acbak archive")
	ErrTruncatedHeader    = errors.New("truncated frame header")
	ErrTruncatedPayload   = errors.New("truncated frame payload")
	ErrFrameTooLarge      = errors.New("frame length exceeds the limit")
	ErrFirstNotHeader     = errors.New("first record is not a HeaderRecord")
	ErrUnsupportedVersion = errors.New("unsupported archive format version")
	ErrOutsideModel       = errors.New("record outside of a model section")
	ErrBadNesting         = errors.New("model sections out of order")
	ErrModelEndMismatch   = errors.New("ModelEndRecord name differs from its ModelStartRecord")
	ErrMissingEOF         = errors.New("archive ends without an EofRecord")
	ErrAfterEOF           = errors.New("data after the EofRecord")
)

// Error is a problem at one frame of an archive.
type Error struct {
	Frame  int   // index of the frame, 0-based
	Offset int64 // byte offset of the frame's length prefix
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("frame %d at offset %d: %v", e.Frame, e.Offset, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Warning is a deviation that lenient mode accepts, as SpecStar's loader
// does: a missing EofRecord, data after it, or a mismatched ModelEnd name.
type Warning = Error

// contract tracks the record order the storage contract requires. The
// reader and the writer share it, so we never write what we would reject.
type contract struct {
	started bool   // HeaderRecord seen
	model   string // open model section
	inModel bool
	ended   bool // EofRecord seen
}

// step checks one record. lenientErr marks errors that lenient mode
// downgrades to warnings.
func (c *contract) step(rec events.Record) (err error, lenientErr bool) {
	tag := rec.Tag()
	if !c.started {
		if tag != events.TagHeader {
			return fmt.Errorf("%w: got %s", ErrFirstNotHeader, tag), false
		}
		c.started = true
		if v := rec.(*events.HeaderRecord).Version; v != events.FormatVersion {
			return fmt.Errorf("%w %d (this reader supports %d)", ErrUnsupportedVersion, v, events.FormatVersion), false
		}
		return nil, false
	}
	switch r := rec.(type) {
	case *events.HeaderRecord:
		return fmt.Errorf("%w: a second HeaderRecord", ErrBadNesting), false
	case *events.ModelStartRecord:
		if c.inModel {
			return fmt.Errorf("%w: ModelStartRecord %q inside model section %q", ErrBadNesting, r.ModelName, c.model), false
		}
		c.inModel, c.model = true, r.ModelName
	case *events.ModelEndRecord:
		if !c.inModel {
			return fmt.Errorf("%w: ModelEndRecord %q without a ModelStartRecord", ErrBadNesting, r.ModelName), false
		}
		open := c.model
		c.inModel, c.model = false, ""
		if r.ModelName != open {
			return fmt.Errorf("%w: ModelStart %q closed by ModelEnd %q", ErrModelEndMismatch, open, r.ModelName), true
		}
	case *events.MetaRecord, *events.RevisionRecord, *events.BlobRecord:
		if !c.inModel {
			return fmt.Errorf("%w: %s", ErrOutsideModel, tag), false
		}
	case *events.EofRecord:
		c.ended = true
		if c.inModel {
			return fmt.Errorf("%w: EofRecord inside model section %q", ErrBadNesting, c.model), true
		}
	}
	return nil, false
}

// finish checks the end of the stream.
func (c *contract) finish() (err error, lenientErr bool) {
	if !c.started {
		return ErrEmpty, false
	}
	if !c.ended {
		if c.inModel {
			return fmt.Errorf("%w (model section %q still open)", ErrMissingEOF, c.model), true
		}
		return ErrMissingEOF, true
	}
	return nil, false
}
