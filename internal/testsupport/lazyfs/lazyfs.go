// Package lazyfs is a FUSE file system for power-cut tests: a loopback
// mount of a backing directory that remembers what has not been fsynced
// and, on Cut, throws it away, as a machine losing power loses its page
// cache. It is the idea of Jepsen's LazyFS, small enough to read: every
// write, truncate or fallocate first saves the bytes it replaces (an undo
// log per inode); fsync or fdatasync of the inode forgets that log; Cut
// replays every log backwards, so each file holds exactly what its last
// fsync left, and fails every later operation with EIO.
//
// What it models is the data of files. Names (create, rename, unlink,
// mkdir) are kept as if the directory had been fsynced, as ext4's
// data=ordered mode mostly does; a file created and never fsynced
// survives a cut empty, the well-known zero-length file.
//
// The backing directory is never really powered off, so an fsync only
// ends the undo log; it does not wait for the disk. Timings measured on a
// lazyfs mount say nothing about a real disk.
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is one mounted lazyfs.
type FS struct {
	dir    string
	server *fuse.Server

	mu    sync.Mutex
	cut   bool
	dirty map[uint64]*dirty // by backing inode number
}

// dirty is what one inode has been written since its last fsync.
type dirty struct {
	f        *os.File // the backing inode, to revert it even after a rename or close
	origSize int64    // its size at its last fsync
	undo     []undo   // oldest first
}

// undo is the bytes one operation replaced, to write back on Cut.
type undo struct {
	off  int64
	data []byte
}

// Lost is what a Cut threw away.
type Lost struct {
	Files int   // inodes that had unsynced changes
	Bytes int64 // bytes written past or over their last fsync, now gone
}

// Mount serves backing at dir (both existing directories). It needs
// /dev/fuse and the right to mount (root, or fusermount3 from Debian's
// fuse3).
func Mount(dir, backing string) (*FS, error) {
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: backing directory %s: %w", backing, err)
	}
	l := &FS{dir: dir, dirty: map[uint64]*dirty{}}
	top := &node{LoopbackNode: root.(*fs.LoopbackNode), fs: l}
	opts := &fs.Options{MountOptions: fuse.MountOptions{
		FsName:      "lazyfs:" + backing,
		Name:        "lazyfs",
		DirectMount: true, // mount(2) as root; fusermount3 otherwise
	}}
	l.server, err = fs.Mount(dir, top, opts)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s on %s (needs /dev/fuse, and root or fuse3's fusermount3): %w", backing, dir, err)
	}
	return l, nil
}

// Dir is where the file system is mounted.
func (l *FS) Dir() string { return l.dir }

// Cut is the power cut: every inode goes back to what its last fsync
// left, and every later write, open or sync fails with EIO. Stop (SIGSTOP)
// the processes using the mount first, so that none of them writes in
// between; then kill them and Unmount.
func (l *FS) Cut() (Lost, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	var lost Lost
	var errs []error
	for ino, d := range l.dirty {
		n, err := d.revert()
		lost.Files++
		lost.Bytes += n
		if err != nil {
			errs = append(errs, fmt.Errorf("lazyfs: revert inode %d: %w", ino, err))
		}
		delete(l.dirty, ino)
	}
	return lost, errors.Join(errs...)
}

// Pending is what a Cut now would throw away.
func (l *FS) Pending() Lost {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p Lost
	for _, d := range l.dirty {
		p.Files++
		if fi, err := d.f.Stat(); err == nil && fi.Size() > d.origSize {
			p.Bytes += fi.Size() - d.origSize
		}
		for _, u := range d.undo {
			p.Bytes += int64(len(u.data))
		}
	}
	return p
}

// Unmount ends the mount. After a Cut it succeeds once the processes that
// had files open on it are gone; it falls back to a lazy unmount.
func (l *FS) Unmount() error {
	err := l.server.Unmount()
	if err != nil {
		if e := syscall.Unmount(l.dir, syscall.MNT_DETACH); e != nil {
			return fmt.Errorf("lazyfs: unmount %s: %w (lazy: %v)", l.dir, err, e)
		}
	}
	l.server.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for ino, d := range l.dirty {
		d.f.Close()
		delete(l.dirty, ino)
	}
	return nil
}

// revert writes back what the undo log saved, newest first, and cuts the
// file to its synced size. It returns the bytes thrown away.
func (d *dirty) revert() (int64, error) {
	defer d.f.Close()
	var n int64
	if fi, err := d.f.Stat(); err == nil && fi.Size() > d.origSize {
		n += fi.Size() - d.origSize
	}
	for i := len(d.undo) - 1; i >= 0; i-- {
		u := d.undo[i]
		n += int64(len(u.data))
		if _, err := d.f.WriteAt(u.data, u.off); err != nil {
			return n, err
		}
	}
	return n, d.f.Truncate(d.origSize)
}

// change records, before an operation replaces [off, end) of the inode
// behind fd, the bytes it replaces; the caller holds l.mu. Bytes past the
// synced size need no record: the revert truncates them away.
func (l *FS) change(ino uint64, fd int, off, end int64) syscall.Errno {
	if l.cut {
		return syscall.EIO
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	d := l.dirty[ino]
	if d == nil {
		dup, err := syscall.Dup(fd)
		if err != nil {
			return fs.ToErrno(err)
		}
		d = &dirty{f: os.NewFile(uintptr(dup), fmt.Sprintf("inode %d", ino)), origSize: st.Size}
		l.dirty[ino] = d
	}
	end = min(end, st.Size, d.origSize)
	if off >= end {
		return 0
	}
	old := make([]byte, end-off)
	if _, err := d.f.ReadAt(old, off); err != nil {
		return fs.ToErrno(err)
	}
	d.undo = append(d.undo, undo{off: off, data: old})
	return 0
}

// synced forgets the inode's undo log: its data is now on "disk".
func (l *FS) synced(ino uint64) syscall.Errno {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return syscall.EIO
	}
	if d := l.dirty[ino]; d != nil {
		d.f.Close()
		delete(l.dirty, ino)
	}
	return 0
}

// node is a loopback node whose files keep undo logs.
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// WrapChild makes every node below the root a lazyfs node too.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

func (n *node) ino() uint64 { return n.StableAttr().Ino }

// Open opens the backing file itself, so that writes pass through file.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.fs.isCut() {
		return nil, 0, syscall.EIO
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.wrap(fh), fuseFlags, 0
}

// Create creates the backing file; its name is kept, its data is not
// until an fsync.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.fs.isCut() {
		return nil, nil, 0, syscall.EIO
	}
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	c := ch.Operations().(*node)
	return ch, c.wrap(fh), fuseFlags, 0
}

// Tmpfile is refused (O_TMPFILE): callers fall back to a named file,
// which Create covers.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange is refused: callers fall back to reads and writes, which
// the undo log covers.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Setattr records what a truncate by name (no open file) throws away.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && f == nil {
		fd, err := os.OpenFile(filepath.Join(n.RootData.Path, n.Path(n.Root())), os.O_RDWR, 0)
		if err != nil {
			return fs.ToErrno(err)
		}
		defer fd.Close()
		n.fs.mu.Lock()
		defer n.fs.mu.Unlock()
		if errno := n.fs.change(n.ino(), int(fd.Fd()), int64(sz), 1<<62); errno != 0 {
			return errno
		}
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// Fsync of the inode without an open file (or of a directory).
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if fh, ok := f.(*file); ok {
		return fh.Fsync(ctx, flags)
	}
	return n.fs.synced(n.ino())
}

func (l *FS) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

// wrap puts the loopback handle behind a file, which keeps the undo log.
func (n *node) wrap(fh fs.FileHandle) fs.FileHandle {
	return &file{lf: fh.(*fs.LoopbackFile), ino: n.ino(), fs: n.fs}
}
