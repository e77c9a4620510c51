package disk

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/sqlitemeta"
	"github.com/specstar/replicator/sink/internal/store"
)

// Meta reads a resource's stored ResourceMeta, from the .data file or the
// SQLite row, so a sink can be verified against an archive. The error wraps
// fs.ErrNotExist if there is none.
func (d *Sink) Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	if err := store.CheckModel(model); err != nil {
		return nil, err
	}
	if err := store.CheckResourceID(resourceID); err != nil {
		return nil, err
	}
	var (
		raw   []byte
		where string
	)
	if d.sqliteMeta(model) {
		db, path, err := d.metaDB(ctx, model, false)
		if err != nil {
			return nil, err
		}
		where = fmt.Sprintf("%s row %q", path, resourceID)
		var found bool
		raw, found, err = sqlitemeta.Get(ctx, db, resourceID)
		if err != nil {
			return nil, fmt.Errorf("sink: meta %s: %w", where, err)
		}
		if !found {
			return nil, fmt.Errorf("sink: meta %s: %w", where, fs.ErrNotExist)
		}
	} else if q, _ := d.queuedMetaOf(model + "\x00" + resourceID); q != nil {
		where, raw = filepath.Join(q.dir, q.name)+" (not yet flushed)", q.encoded // read your own writes
	} else {
		where = filepath.Join(d.root, model, "meta", resourceID+store.MetaSuffix)
		var err error
		if raw, err = os.ReadFile(where); err != nil {
			return nil, fmt.Errorf("sink: meta: %w", err)
		}
	}
	meta, err := events.DecodeResourceMeta(d.opts.Encoding, raw)
	if err != nil {
		return nil, fmt.Errorf("sink: meta %s: %w", where, err)
	}
	return meta, nil
}

// Revision reads one revision through its index entry (a uid file or an
// older-form symlink), returning its RevisionInfo and payload bytes, so a
// sink (or a tree SpecStar wrote) can be verified against an archive. The
// uid an entry names is read from store/{uid} below the root: a symlink is
// never followed out of it. The error wraps fs.ErrNotExist if the entry or
// its store files are missing.
func (d *Sink) Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error) {
	if err := d.check(ctx); err != nil {
		return nil, nil, err
	}
	if err := store.CheckRevisionKey(model, resourceID, revisionID, schemaVersion); err != nil {
		return nil, nil, err
	}
	dataDir := filepath.Join(d.root, model, "data")
	slot := filepath.Join(dataDir, "resource", resourceID, revisionID, store.SchemaDir(schemaVersion))
	st, err := readSlot(slot)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case st.form == slotNone:
		return nil, nil, fmt.Errorf("sink: index entry %s: %w", slot, fs.ErrNotExist)
	case st.uid == "":
		return nil, nil, fmt.Errorf("sink: index entry %s names no valid uid", slot)
	}
	storeDir := filepath.Join(dataDir, "store", st.uid)
	infoBytes, err := os.ReadFile(filepath.Join(storeDir, "info"))
	if err != nil {
		return nil, nil, fmt.Errorf("sink: revision info: %w", err)
	}
	info, err := events.DecodeRevisionInfo(d.opts.Encoding, infoBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: revision info %s: %w", filepath.Join(storeDir, "info"), err)
	}
	data, err := os.ReadFile(filepath.Join(storeDir, "data"))
	if err != nil {
		return nil, nil, fmt.Errorf("sink: revision data: %w", err)
	}
	return info, data, nil
}

// OpenBlob opens a stored blob: its Binary without Data, plus a reader of
// the data bytes, streamed from the file (memory does not grow with the
// blob). The caller closes the reader. The error wraps fs.ErrNotExist if
// the blob is absent.
func (d *Sink) OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error) {
	if err := d.check(ctx); err != nil {
		return nil, nil, err
	}
	name, err := store.CheckFileID(fileID)
	if err != nil {
		return nil, nil, err
	}
	return openBlobFile(filepath.Join(d.root, store.BlobsDir, name))
}

type readCloser struct {
	io.Reader
	io.Closer
}

// countReader counts the bytes read through it.
type countReader struct {
	r *bufio.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

func (c *countReader) full(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// maxBlobField bounds the string fields read before the data (file_id,
// content_type), which SpecStar keeps short.
const maxBlobField = 1 << 20

// readBinaryHeader reads a msgpack Binary map up to the start of its data
// bytes, returning the other fields and the data length (-1 if the map has
// no data field). Fields after data, if any, are not read.
func readBinaryHeader(r *countReader) (*events.Binary, int64, error) {
	count, err := readMapHeader(r)
	if err != nil {
		return nil, 0, err
	}
	bin := &events.Binary{}
	for i := 0; i < count; i++ {
		key, err := readStr(r)
		if err != nil {
			return nil, 0, fmt.Errorf("key: %w", err)
		}
		switch key {
		case "file_id", "content_type":
			s, err := readStr(r)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", key, err)
			}
			if key == "file_id" {
				bin.FileID = events.Some(s)
			} else {
				bin.ContentType = events.Some(s)
			}
		case "size":
			n, err := readInt(r)
			if err != nil {
				return nil, 0, fmt.Errorf("size: %w", err)
			}
			bin.Size = events.Some(n)
		case "data":
			n, err := readBinHeader(r)
			if err != nil {
				return nil, 0, fmt.Errorf("data: %w", err)
			}
			return bin, n, nil
		default:
			if err := skipValue(r, 0); err != nil {
				return nil, 0, fmt.Errorf("%s: %w", key, err)
			}
		}
	}
	return bin, -1, nil
}

func readMapHeader(r *countReader) (int, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), nil
	case c == 0xde:
		b, err := r.full(2)
		if err != nil {
			return 0, err
		}
		return int(binary.BigEndian.Uint16(b)), nil
	case c == 0xdf:
		b, err := r.full(4)
		if err != nil {
			return 0, err
		}
		return int(binary.BigEndian.Uint32(b)), nil
	}
	return 0, fmt.Errorf("expected a map, found byte 0x%02x", c)
}

func readStr(r *countReader) (string, error) {
	c, err := r.ReadByte()
	if err != nil {
		return "", err
	}
	var n int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xd9, c == 0xda, c == 0xdb:
		w := 1 << (c - 0xd9)
		b, err := r.full(w)
		if err != nil {
			return "", err
		}
		n = int(readUint(b))
	default:
		return "", fmt.Errorf("expected a string, found byte 0x%02x", c)
	}
	if n > maxBlobField {
		return "", fmt.Errorf("string of %d bytes is too long", n)
	}
	b, err := r.full(n)
	return string(b), err
}

func readInt(r *countReader) (int64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c >= 0xcc && c <= 0xcf:
		b, err := r.full(1 << (c - 0xcc))
		if err != nil {
			return 0, err
		}
		u := readUint(b)
		if u > 1<<63-1 {
			return 0, fmt.Errorf("integer %d out of range", u)
		}
		return int64(u), nil
	case c >= 0xd0 && c <= 0xd3:
		b, err := r.full(1 << (c - 0xd0))
		if err != nil {
			return 0, err
		}
		u := readUint(b)
		shift := 64 - 8*uint(len(b))
		return int64(u<<shift) >> shift, nil
	}
	return 0, fmt.Errorf("expected an integer, found byte 0x%02x", c)
}

func readBinHeader(r *countReader) (int64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	if c < 0xc4 || c > 0xc6 {
		return 0, fmt.Errorf("expected bytes, found byte 0x%02x", c)
	}
	b, err := r.full(1 << (c - 0xc4))
	if err != nil {
		return 0, err
	}
	return int64(readUint(b)), nil
}

func readUint(b []byte) uint64 {
	var u uint64
	for _, x := range b {
		u = u<<8 | uint64(x)
	}
	return u
}

// skipValue reads past one msgpack value of a field this version does not
// know.
func skipValue(r *countReader, depth int) error {
	if depth > 64 {
		return errors.New("nesting too deep")
	}
	c, err := r.ReadByte()
	if err != nil {
		return err
	}
	skip := func(n int64) error {
		_, err := io.CopyN(io.Discard, r, n)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	length := func(w int) (int64, error) {
		b, err := r.full(w)
		if err != nil {
			return 0, err
		}
		return int64(readUint(b)), nil
	}
	items := func(n int64) error {
		for ; n > 0; n-- {
			if err := skipValue(r, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return nil
	case c >= 0x80 && c <= 0x8f:
		return items(2 * int64(c&0x0f))
	case c >= 0x90 && c <= 0x9f:
		return items(int64(c & 0x0f))
	case c >= 0xa0 && c <= 0xbf:
		return skip(int64(c & 0x1f))
	case c == 0xc4 || c == 0xc5 || c == 0xc6:
		n, err := length(1 << (c - 0xc4))
		if err != nil {
			return err
		}
		return skip(n)
	case c == 0xc7 || c == 0xc8 || c == 0xc9:
		n, err := length(1 << (c - 0xc7))
		if err != nil {
			return err
		}
		return skip(n + 1)
	case c == 0xca:
		return skip(4)
	case c == 0xcb:
		return skip(8)
	case c >= 0xcc && c <= 0xcf:
		return skip(1 << (c - 0xcc))
	case c >= 0xd0 && c <= 0xd3:
		return skip(1 << (c - 0xd0))
	case c >= 0xd4 && c <= 0xd8:
		return skip(1 + 1<<(c-0xd4))
	case c == 0xd9 || c == 0xda || c == 0xdb:
		n, err := length(1 << (c - 0xd9))
		if err != nil {
			return err
		}
		return skip(n)
	case c == 0xdc || c == 0xdd:
		n, err := length(2 << (c - 0xdc))
		if err != nil {
			return err
		}
		return items(n)
	case c == 0xde || c == 0xdf:
		n, err := length(2 << (c - 0xde))
		if err != nil {
			return err
		}
		return items(2 * n)
	}
	return fmt.Errorf("invalid msgpack byte 0x%02x", c)
}
