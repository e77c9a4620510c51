package events

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// mpWriter writes msgpack exactly as msgspec.msgpack.Encoder does, through
// vmihailenco's typed Encode* calls, which already pick the smallest form
// for ints, strings (str8 for 32..255 bytes), bins, maps and timestamps.
// Writes go to a bytes.Buffer, which cannot fail, so errors are dropped.
type mpWriter struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newMPWriter() *mpWriter {
	w := &mpWriter{}
	w.buf.Grow(512) // most structs fit; avoids several small regrowths
	// Reset leaves UseCompactInts off, which only matters for Encode(v) of
	// typed Go ints; the explicit EncodeInt/EncodeUint calls below always
	// choose the smallest form, as msgspec does.
	w.enc = msgpack.NewEncoder(&w.buf)
	return w
}

func (w *mpWriter) bytes() []byte { return w.buf.Bytes() }

func (w *mpWriter) nil() { _ = w.enc.EncodeNil() }

func (w *mpWriter) boolean(v bool) { _ = w.enc.EncodeBool(v) }

// int writes a signed int; non-negative values take the unsigned forms
// (0xcc..0xcf, positive fixint) as in msgspec.
func (w *mpWriter) int(v int64) { _ = w.enc.EncodeInt(v) }

func (w *mpWriter) uint(v uint64) { _ = w.enc.EncodeUint(v) }

// float always writes float64 (0xcb). msgspec never narrows to float32;
// vmihailenco would only with UseCompactFloats, which we leave off.
func (w *mpWriter) float(v float64) { _ = w.enc.EncodeFloat64(v) }

func (w *mpWriter) str(v string) { _ = w.enc.EncodeString(v) }

// bin writes bytes. vmihailenco's EncodeBytes(nil) writes nil (0xc0), but
// msgspec writes an empty bytes value as bin8 of length 0 (0xc400), so the
// header and body are written separately.
func (w *mpWriter) bin(v []byte) {
	w.buf.Grow(len(v) + 5)
	_ = w.enc.EncodeBytesLen(len(v))
	w.buf.Write(v)
}

func (w *mpWriter) mapHeader(n int) { _ = w.enc.EncodeMapLen(n) }

func (w *mpWriter) arrayHeader(n int) { _ = w.enc.EncodeArrayLen(n) }

// structHeader writes the map header of a msgspec Struct. msgspec sizes the
// header from the declared field count and patches in the written count, so
// a struct declaring 16+ fields gets a map16 header (0xde) even when fewer
// than 16 are written; vmihailenco's EncodeMapLen would write a fixmap.
func (w *mpWriter) structHeader(written, declared int) {
	if declared >= 16 && written < 16 {
		w.buf.Write([]byte{msgpcode.Map16, 0, byte(written)})
		return
	}
	w.mapHeader(written)
}

// datetime writes an aware datetime as the msgpack Timestamp extension in
// UTC (timestamp32/64/96, smallest that fits: vmihailenco's rule matches
// msgspec's), and a naive one as its ISO string, as msgspec does.
func (w *mpWriter) datetime(t Time) {
	if t.Naive {
		w.str(t.Format())
		return
	}
	_ = w.enc.EncodeTime(t.Time)
}

func (w *mpWriter) ext(x Ext) {
	_ = w.enc.EncodeExtHeader(x.Type, len(x.Data))
	w.buf.Write(x.Data)
}

// raw appends bytes that are already msgpack.
func (w *mpWriter) raw(p []byte) { w.buf.Write(p) }
