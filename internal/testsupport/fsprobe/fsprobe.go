// Package fsprobe measures what a file system charges to create inodes,
// so that a benchmark writing file trees can report the state of the file
// system it ran on beside its own figures.
//
// On ext4 without a journal (the project's machines) that cost is not a
// constant: the inode allocator skips, one by one, every free inode
// deleted in the last minute or more (ialloc.c's recently_deleted), so a
// tree deleted just before a run (a test's cleanup, the previous
// benchmark's) makes each new file and directory several times dearer for
// minutes (six, measured, while new inodes keep their inode table blocks
// dirty). A benchmark that reports Cost beside its timings says which
// state it measured in; Cost's own inodes land in one or two block
// groups, so it understates what a large tree meets.
package fsprobe

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cost makes n directories under a new directory in dir, each holding a
// 600-byte file (the shape of a revision's store entry), and returns the
// system CPU spent per inode made, measured on the calling thread alone.
// What it makes is left in place: deleting it would itself make the
// next creations dearer. It returns the directory it made, for the
// caller to remove when nothing more is measured.
func Cost(dir string, n int) (perInode time.Duration, made string, err error) {
	made, err = os.MkdirTemp(dir, "fsprobe-")
	if err != nil {
		return 0, "", fmt.Errorf("fsprobe: %w", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	data := make([]byte, 600)
	before, err := threadSys()
	if err != nil {
		return 0, made, err
	}
	for i := range n {
		d := filepath.Join(made, fmt.Sprintf("%08x", uint32(i)*2654435761))
		if err := unix.Mkdir(d, 0o755); err != nil {
			return 0, made, fmt.Errorf("fsprobe: mkdir %s: %w", d, err)
		}
		if err := createFile(filepath.Join(d, "data"), data); err != nil {
			return 0, made, err
		}
	}
	after, err := threadSys()
	if err != nil {
		return 0, made, err
	}
	return (after - before) / time.Duration(2*max(n, 1)), made, nil
}

// createFile creates path holding data with raw system calls, as the disk
// sink does (os.OpenFile would add the runtime poller's calls to what is
// measured).
func createFile(path string, data []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("fsprobe: create %s: %w", path, err)
	}
	n, err := unix.Write(fd, data)
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsprobe: write %s: %w", path, err)
	}
	return nil
}

// threadSys is the system CPU time the calling thread has used.
func threadSys() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, fmt.Errorf("fsprobe: getrusage: %w", err)
	}
	return time.Duration(ru.Stime.Nano()), nil
}

// Describe names the file system holding dir, from /proc/self/mountinfo
// (the longest mount point that holds dir), and for ext4 whether it keeps
// a journal (/proc/fs/jbd2 lists the devices that have one).
func Describe(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer f.Close()
	best, fstype, source := "", "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for k, s := range fields {
			if s == "-" {
				sep = k
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		mp := fields[4]
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, fstype, source = mp, fields[sep+1], fields[sep+2]
		}
	}
	if best == "" {
		return "unknown (no mount holds " + abs + ")"
	}
	desc := fmt.Sprintf("%s (%s on %s)", fstype, source, best)
	if fstype == "ext4" {
		if m, _ := filepath.Glob("/proc/fs/jbd2/" + filepath.Base(source) + "-*"); len(m) > 0 {
			desc += ", with a journal"
		} else {
			desc += ", without a journal"
		}
	}
	return desc
}
