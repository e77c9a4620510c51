package lazyfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// file is an open file of a lazyfs. It forwards to a loopback handle by
// name, method by method, rather than embedding it: an embedded handle
// would bring Writev, Ioctl and PassthroughFd (the kernel then writing to
// the backing file directly), all of which would bypass the undo log.
type file struct {
	lf  *fs.LoopbackFile
	ino uint64
	fs  *FS
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileWritever  = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileGetlker   = (*file)(nil)
	_ fs.FileSetlker   = (*file)(nil)
	_ fs.FileSetlkwer  = (*file)(nil)
)

// fd is the backing descriptor, valid until Release.
func (f *file) fd() (int, syscall.Errno) {
	fd, ok := f.lf.PassthroughFd()
	if !ok {
		return -1, syscall.EBADF
	}
	return fd, 0
}

// record saves what [off, end) holds before a change to it; the caller
// holds f.fs.mu.
func (f *file) record(off, end int64) syscall.Errno {
	fd, errno := f.fd()
	if errno != 0 {
		return errno
	}
	return f.fs.change(f.ino, fd, off, end)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if errno := f.record(off, off+int64(len(data))); errno != 0 {
		return 0, errno
	}
	return f.lf.Write(ctx, data, off)
}

func (f *file) Writev(ctx context.Context, iov [][]byte, off int64) (uint32, syscall.Errno) {
	var data []byte
	for _, b := range iov {
		data = append(data, b...)
	}
	return f.Write(ctx, data, off)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if sz, ok := in.GetSize(); ok {
		if errno := f.record(int64(sz), 1<<62); errno != 0 {
			return errno
		}
	}
	return f.lf.Setattr(ctx, in, out)
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	// Any mode may change data (punching a hole zeroes it) or the size.
	if errno := f.record(int64(off), int64(off+size)); errno != 0 {
		return errno
	}
	return f.lf.Allocate(ctx, off, size, mode)
}

// Fsync (and fdatasync) make the inode's writes so far survive a cut.
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return f.fs.synced(f.ino)
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}

func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }

func (f *file) Flush(ctx context.Context) syscall.Errno { return f.lf.Flush(ctx) }

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}

func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return f.lf.Getlk(ctx, owner, lk, flags, out)
}

func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlk(ctx, owner, lk, flags)
}

func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlkw(ctx, owner, lk, flags)
}
