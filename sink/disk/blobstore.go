package disk

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// BlobStore reads a SpecStar DiskBlobStore directory ({dir}/{file_id},
// msgpack Binary files) wherever a deployment keeps it, so publishers can
// send the blobs that payloads reference.
type BlobStore struct {
	dir string
}

// OpenBlobStore opens the DiskBlobStore directory dir for reading. A
// directory that does not exist yet is an empty store (SpecStar creates it
// with the first blob).
func OpenBlobStore(dir string) (*BlobStore, error) {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return &BlobStore{dir: dir}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("blob store %s is not a directory", dir)
	}
	return &BlobStore{dir: dir}, nil
}

// OpenBlob returns a blob's Binary (without Data) and a reader of its
// bytes, streamed from the file; an error wrapping fs.ErrNotExist if the
// store does not hold it.
func (s *BlobStore) OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	name, err := store.CheckFileID(fileID)
	if err != nil {
		return nil, nil, err
	}
	return openBlobFile(filepath.Join(s.dir, name))
}

// openBlobFile opens one DiskBlobStore file and positions a reader on its
// data bytes, checking that the file holds exactly the declared data.
func openBlobFile(path string) (*events.Binary, io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: blob: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sink: blob: %w", err)
	}
	r := &countReader{r: bufio.NewReaderSize(f, 32<<10)}
	bin, n, err := readBinaryHeader(r)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sink: blob %s: %w", path, err)
	}
	if n < 0 {
		f.Close()
		return nil, nil, fmt.Errorf("sink: blob %s: no data field", path)
	}
	if r.n+n != st.Size() {
		f.Close()
		return nil, nil, fmt.Errorf("sink: blob %s: data of %d bytes at offset %d, but the file has %d bytes", path, n, r.n, st.Size())
	}
	return bin, readCloser{io.LimitReader(r, n), f}, nil
}
