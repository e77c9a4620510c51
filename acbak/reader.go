package acbak

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"

	"github.com/specstar/replicator/events"
)

// DefaultMaxFrame is the largest frame a Reader accepts unless told
// otherwise. SpecStar inlines whole blobs in BlobRecords, so this is also
// the largest blob an archive can carry through this reader, and the bound
// on the reader's memory.
const DefaultMaxFrame = 256 << 20

// readChunk is how much of a frame is allocated at a time, so that a frame
// whose declared length overstates what the input holds costs no more than
// the bytes actually there.
const readChunk = 1 << 20

// Options tune a Reader.
type Options struct {
	// MaxFrame is the largest payload accepted (DefaultMaxFrame if 0).
	MaxFrame int64
	// Lenient accepts, with a Warning each, what SpecStar's own loader
	// accepts: a missing EofRecord, bytes after it, and a ModelEndRecord
	// whose name differs from its ModelStartRecord.
	Lenient bool
	// KeepUnknown returns records with unknown tags to the caller as
	// *events.UnknownRecord; by default they are skipped and counted.
	KeepUnknown bool
	// RequireCurrent makes Verify treat a meta whose current revision is
	// missing from the archive as an error instead of a warning.
	RequireCurrent bool
	// Size is the input's total length if known (0 if not); with it a
	// declared length beyond the end is reported as truncation at once.
	Size int64
}

// Frame is one record of an archive and where it was found.
type Frame struct {
	Index   int
	Offset  int64  // byte offset of the length prefix
	Payload []byte // the msgpack payload, exactly as read
	Record  events.Record
}

// Reader streams an archive frame by frame. It holds at most one frame in
// memory and enforces the storage contract's record order.
type Reader struct {
	r        *bufio.Reader
	opts     Options
	off      int64
	index    int
	c        contract
	done     bool
	err      error
	warnings []Warning
	unknown  map[string]int
}

// NewReader reads an archive from r. If r is an *os.File (or anything with
// Stat), pass its size in opts.Size for early truncation reports.
func NewReader(r io.Reader, opts Options) *Reader {
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), opts: opts, unknown: map[string]int{}}
}

// Offset is the number of bytes consumed so far.
func (r *Reader) Offset() int64 { return r.off }

// Frames is the number of frames read so far.
func (r *Reader) Frames() int { return r.index }

// Warnings lists what lenient mode accepted.
func (r *Reader) Warnings() []Warning { return r.warnings }

// Unknown counts the skipped (or kept) records per unknown tag.
func (r *Reader) Unknown() map[string]int { return r.unknown }

func (r *Reader) fail(err error) error {
	r.err = &Error{Frame: r.index, Offset: r.off, Err: err}
	return r.err
}

// Next returns the next frame, io.EOF after the last one, or an *Error.
// After an error every call returns the same error.
func (r *Reader) Next() (*Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	for {
		if r.done {
			return nil, io.EOF
		}
		f, err := r.next()
		if err != nil {
			return nil, err
		}
		if f == nil {
			continue
		}
		return f, nil
	}
}

// maxHeaderFrame bounds the first frame: an archive's HeaderRecord frame
// is a few bytes, so a larger declared length means the input is not an
// archive at all.
const maxHeaderFrame = 4096

// next reads one frame; it returns (nil, nil) for a skipped frame. The
// first frame's faults say the input is not an archive, rather than
// reporting a truncation of a length that was never one.
func (r *Reader) next() (*Frame, error) {
	if r.index > 0 || r.c.started {
		return r.frame()
	}
	f, err := r.frame()
	var e *Error
	if errors.As(err, &e) && e == r.err && !errors.Is(err, ErrEmpty) {
		e.Err = fmt.Errorf("%w: the first frame %w", ErrNotArchive, e.Err)
	}
	return f, err
}

// frame reads one frame; it returns (nil, nil) for a skipped frame.
func (r *Reader) frame() (*Frame, error) {
	var hdr [4]byte
	n, err := io.ReadFull(r.r, hdr[:])
	switch {
	case err == io.EOF:
		return nil, r.atEnd()
	case err == io.ErrUnexpectedEOF:
		if r.c.ended && r.opts.Lenient {
			return nil, r.trailing(int64(n))
		}
		if r.c.ended {
			return nil, r.fail(fmt.Errorf("%w: %d stray bytes", ErrAfterEOF, n))
		}
		return nil, r.fail(fmt.Errorf("%w: %d of 4 length bytes", ErrTruncatedHeader, n))
	case err != nil:
		return nil, r.fail(err)
	}
	if r.c.ended {
		// Anything after the EofRecord; upstream's loader stops at Eof.
		if r.opts.Lenient {
			return nil, r.trailing(4)
		}
		return nil, r.fail(fmt.Errorf("%w", ErrAfterEOF))
	}
	length := int64(binary.BigEndian.Uint32(hdr[:]))
	if r.index == 0 && length > maxHeaderFrame {
		return nil, r.fail(fmt.Errorf("declares %d bytes, where an archive's HeaderRecord takes a few", length))
	}
	if r.opts.Size > 0 {
		if remain := r.opts.Size - r.off - 4; length > remain {
			return nil, r.fail(fmt.Errorf("%w: declares %d bytes, %d remain", ErrTruncatedPayload, length, max(remain, 0)))
		}
	}
	if length > r.opts.MaxFrame {
		return nil, r.fail(fmt.Errorf("%w: declares %d bytes, limit is %d", ErrFrameTooLarge, length, r.opts.MaxFrame))
	}
	payload, err := r.readPayload(int(length))
	if err != nil {
		return nil, err
	}
	rec, err := events.DecodeRecord(events.Msgpack, payload)
	if err != nil {
		return nil, r.fail(err)
	}
	f := &Frame{Index: r.index, Offset: r.off, Payload: payload, Record: rec}
	if _, unknown := rec.(*events.UnknownRecord); unknown && r.c.started {
		r.unknown[rec.Tag()]++
		r.advance(length)
		if r.opts.KeepUnknown {
			return f, nil
		}
		return nil, nil
	}
	if err, lenientErr := r.c.step(rec); err != nil {
		if !(lenientErr && r.opts.Lenient) {
			return nil, r.fail(err)
		}
		r.warnings = append(r.warnings, Warning{Frame: r.index, Offset: r.off, Err: err})
	}
	r.advance(length)
	return f, nil
}

func (r *Reader) advance(length int64) {
	r.off += 4 + length
	r.index++
}

// readPayload reads length bytes. When the input size is known the
// length was already checked against it and is allocated at once;
// otherwise the buffer grows as data arrives, so a length that overstates
// the input costs only the bytes actually there.
func (r *Reader) readPayload(length int) ([]byte, error) {
	if r.opts.Size > 0 {
		buf := make([]byte, length)
		n, err := io.ReadFull(r.r, buf)
		if err != nil {
			return nil, r.truncated(length, n, err)
		}
		return buf, nil
	}
	buf := make([]byte, 0, min(length, readChunk))
	for len(buf) < length {
		step := min(length-len(buf), readChunk)
		buf = slices.Grow(buf, step)
		n, err := io.ReadFull(r.r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+n]
		if err != nil {
			return nil, r.truncated(length, len(buf), err)
		}
	}
	return buf, nil
}

func (r *Reader) truncated(length, got int, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return r.fail(fmt.Errorf("%w: declares %d bytes, %d remain", ErrTruncatedPayload, length, got))
	}
	return r.fail(err)
}

// trailing handles bytes after the EofRecord in lenient mode: warn, count
// them, and stop as SpecStar's loader does.
func (r *Reader) trailing(already int64) error {
	rest, err := io.Copy(io.Discard, r.r)
	if err != nil {
		return r.fail(err)
	}
	r.warnings = append(r.warnings, Warning{Frame: r.index, Offset: r.off,
		Err: fmt.Errorf("%w: %d bytes ignored", ErrAfterEOF, already+rest)})
	r.done = true
	return nil
}

func (r *Reader) atEnd() error {
	r.done = true
	if err, lenientErr := r.c.finish(); err != nil {
		if !(lenientErr && r.opts.Lenient) {
			r.done = false
			return r.fail(err)
		}
		r.warnings = append(r.warnings, Warning{Frame: r.index, Offset: r.off, Err: err})
	}
	return nil
}

// All ranges over the frames; the last pair carries the error, if any.
func (r *Reader) All() iter.Seq2[*Frame, error] {
	return func(yield func(*Frame, error) bool) {
		for {
			f, err := r.Next()
			if err == io.EOF {
				return
			}
			if !yield(f, err) || err != nil {
				return
			}
		}
	}
}
