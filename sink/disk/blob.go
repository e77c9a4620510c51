package disk

// ApplyBlob: a blob written once under its file_id, checked by hash.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// binSuffix ends an encoded Binary whose data is empty: the "data" key and
// an empty bin8.
const binSuffix = "\xa4data\xc4\x00"

// blobHeader is the encoding of Binary{file_id, size, content_type?, data}
// up to and including the bin header of data, exactly as Binary.Encode
// writes it for data of the declared size.
func blobHeader(fileID string, size int64, contentType string) ([]byte, error) {
	b := events.Binary{
		FileID: events.Some(fileID),
		Size:   events.Some(size),
		Data:   events.Some([]byte{}),
	}
	if contentType != "" {
		b.ContentType = events.Some(contentType)
	}
	enc, err := b.Encode(events.Msgpack)
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(enc, []byte(binSuffix)) {
		return nil, fmt.Errorf("sink: unexpected Binary encoding % x", enc)
	}
	hdr := enc[:len(enc)-2]
	switch {
	case size <= math.MaxUint8:
		hdr = append(hdr, 0xc4, byte(size))
	case size <= math.MaxUint16:
		hdr = append(hdr, 0xc5)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(size))
	default:
		hdr = append(hdr, 0xc6)
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(size))
	}
	return hdr, nil
}

// copyBufSize is the one buffer a blob is streamed through.
const copyBufSize = 128 << 10

// ApplyBlob materializes one blob without holding it in memory: the Binary
// header, then the data copied from data while it is hashed. The file
// appears (by rename) only if exactly size bytes were read and they hash
// to fileID; otherwise nothing is left behind and the error is an
// *InvalidError. An existing blob file is
// Unchanged (blobs are content-addressed and written once) and data is not
// read. Memory use does not depend on size.
func (d *Sink) ApplyBlob(ctx context.Context, fileID string, size int64, contentType string, data io.Reader) (store.Outcome, error) {
	if err := d.checkWrite(ctx); err != nil {
		return 0, err
	}
	name, err := store.CheckFileID(fileID)
	if err != nil {
		return 0, err
	}
	key := fmt.Sprintf("blob %q", fileID)
	if size < 0 {
		return 0, store.Invalidf(key, "negative size %d", size)
	}
	if size > math.MaxUint32 {
		return 0, store.Invalidf(key, "size %d exceeds what a msgpack bin can hold", size)
	}
	dir := filepath.Join(d.root, store.BlobsDir)
	path := filepath.Join(dir, name)
	unlock := d.locks.Lock("\x00blob\x00" + name)
	defer unlock()
	hdr, err := blobHeader(fileID, size, contentType)
	if err != nil {
		return 0, store.Invalidf(key, "cannot be encoded: %v", err)
	}
	if st, err := os.Lstat(path); err == nil {
		// Content-addressed: written once. A file of the wrong length can
		// only be a write cut short by a power loss: rewrite it.
		if !d.opts.SyncPerBatch || st.Size() == int64(len(hdr))+size {
			return store.Unchanged, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("sink: blob: %w", err)
	}
	if _, err := d.ensureDir(dir); err != nil {
		return 0, err
	}
	var f *os.File
	tmp, err := d.stage(func(tmp string) (err error) {
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sink: blob %s: %w", fileID, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 64<<10)
	if _, err := bw.Write(hdr); err != nil {
		return 0, fmt.Errorf("sink: blob %s: %w", tmp, err)
	}
	h := dedup.NewFileIDHasher()
	src := io.LimitReader(store.CtxReader{Ctx: ctx, R: data}, size+1)
	n, err := io.CopyBuffer(io.MultiWriter(bw, h), src, make([]byte, copyBufSize))
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("sink: blob %s: %w", fileID, err)
	}
	if n != size {
		if n > size {
			return 0, store.Invalidf(key, "more than the declared %d bytes", size)
		}
		return 0, store.Invalidf(key, "%d bytes but the declared size is %d", n, size)
	}
	if got := dedup.HexSum(h); got != fileID {
		return 0, store.Invalidf(key, "bytes hash to %s", got)
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("sink: blob %s: %w", tmp, err)
	}
	if !d.opts.SyncPerBatch {
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("sink: blob %s: %w", tmp, err)
		}
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("sink: blob %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, fmt.Errorf("sink: blob: %w", err)
	}
	ok = true
	d.markDirty(dir)
	return store.Written, nil
}
