package disk

// Creating files with raw system calls: os.OpenFile registers every file
// with the runtime's poller (four fcntl and one epoll_ctl calls that fail
// for regular files), which is a third of the system calls of a revision.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// createFile creates path, which must not exist, writes data and, if sync,
// fsyncs it. On failure nothing is left at path.
func createFile(path string, data []byte, sync bool) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("sink: create %s: %w", path, err)
	}
	err = writeFD(fd, data, sync)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlink(path)
		return fmt.Errorf("sink: write %s: %w", path, err)
	}
	return nil
}

// writeFD writes all of data to fd and, if sync, fsyncs it.
func writeFD(fd int, data []byte, sync bool) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	if sync {
		return unix.Fsync(fd)
	}
	return nil
}

// errNoTmpfile says the file system (or the absence of /proc) does not let
// linkFile work; the caller falls back to a staged write and a rename.
var errNoTmpfile = errors.New("sink: O_TMPFILE not supported here")

// linkFile makes dir/name appear holding exactly data, complete or not at
// all, without a temporary name or a rename: the file is written unnamed
// (O_TMPFILE) and then linked into dir. It fails with an error wrapping
// fs.ErrExist if dir/name exists, and with errNoTmpfile where unnamed
// files cannot be made or linked.
func linkFile(dir, name string, data []byte, sync bool) error {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	switch {
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EINVAL):
		return errNoTmpfile
	case err != nil:
		return fmt.Errorf("sink: create in %s: %w", dir, err)
	}
	defer unix.Close(fd)
	path := filepath.Join(dir, name)
	if err := writeFD(fd, data, sync); err != nil {
		return fmt.Errorf("sink: write %s: %w", path, err)
	}
	// linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the /proc link to
	// the descriptor does the same for anyone.
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.ENOENT) {
		if unix.Access("/proc/self/fd", unix.F_OK) != nil {
			return errNoTmpfile
		}
	}
	if err != nil {
		return fmt.Errorf("sink: link %s: %w", path, err)
	}
	return nil
}
