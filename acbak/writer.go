package acbak

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/specstar/replicator/events"
)

// Writer writes an archive. It checks the same record order the Reader
// enforces, so it never writes an archive it would reject, and encodes each
// record exactly as SpecStar does: the same records give the same bytes.
type Writer struct {
	w     *bufio.Writer
	c     contract
	off   int64
	index int
	err   error
}

// NewWriter writes an archive to w; call Close to flush it.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10)}
}

// Write appends one record as a frame.
func (w *Writer) Write(rec events.Record) error {
	if w.err != nil {
		return w.err
	}
	payload, err := rec.Encode(events.Msgpack)
	if err != nil {
		return w.fail(fmt.Errorf("encode %s: %w", rec.Tag(), err))
	}
	if _, unknown := rec.(*events.UnknownRecord); !unknown || !w.c.started {
		if err, _ := w.c.step(rec); err != nil {
			return w.fail(err)
		}
	}
	return w.frame(payload)
}

func (w *Writer) frame(payload []byte) error {
	if len(payload) > math.MaxUint32 {
		return w.fail(fmt.Errorf("%w: %d bytes cannot be framed", ErrFrameTooLarge, len(payload)))
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(payload)))
	if _, err := w.w.Write(hdr[:]); err != nil {
		return w.fail(err)
	}
	if _, err := w.w.Write(payload); err != nil {
		return w.fail(err)
	}
	w.off += 4 + int64(len(payload))
	w.index++
	return nil
}

func (w *Writer) fail(err error) error {
	w.err = &Error{Frame: w.index, Offset: w.off, Err: err}
	return w.err
}

// Offset is the number of bytes written so far.
func (w *Writer) Offset() int64 { return w.off }

// Close checks that the archive is complete (ends with an EofRecord) and
// flushes it. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if err, _ := w.c.finish(); err != nil {
		return w.fail(err)
	}
	if err := w.w.Flush(); err != nil {
		return w.fail(err)
	}
	return nil
}
