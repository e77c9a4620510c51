package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/sink/layered"
)

// prober is a sink (or a layer's store) that can show its credentials
// allow what a run does: an S3 store (sink/s3.Sink.Probe).
type prober interface {
	Probe(ctx context.Context) error
}

// checkSink checks that a sink opens, that its stores allow what a run
// does, that a disk sink has room for what the stream holds for it, and
// that a consumer serves it.
func checkSink(ctx context.Context, s Sink, st *streamFacts) []Result {
	check := "sink " + s.Name
	if s.DiskRoot != "" {
		if _, err := os.Stat(s.DiskRoot); errors.Is(err, fs.ErrNotExist) {
			return []Result{
				warn(check, "replicator run --to "+s.Name+" creates it", "%s does not exist yet", s.DiskRoot),
				checkDisk("disk "+s.Name, s.DiskRoot, st, nil),
			}
		}
	}
	snk, err := s.Open(ctx)
	if err != nil {
		return []Result{fail(check, "check the URL, that the store runs and the credentials", "cannot open it: %v", err)}
	}
	defer snk.Close()
	parts := []any{snk}
	if l, ok := snk.(*layered.Sink); ok {
		parts = parts[:0]
		for _, p := range l.Stores() {
			parts = append(parts, p)
		}
	}
	var out []Result
	probed := false
	for _, p := range parts {
		if pr, ok := p.(prober); ok {
			probed = true
			if err := pr.Probe(ctx); err != nil {
				out = append(out, fail(check, "grant the sink's credentials s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject on its buckets", "%v", err))
			}
		}
	}
	if len(out) == 0 {
		what := "opens"
		if probed {
			what = "opens; list, put and delete allowed"
		}
		out = append(out, pass(check, "%s", what))
	}
	var c *consumerFacts
	if st != nil {
		if cf, ok := st.consumers[s.Consumer]; ok {
			c = &cf
		} else {
			out = append(out, warn(check, "replicator run --to "+s.Name, "no consumer %s on the stream: no run has written into it yet", s.Consumer))
		}
	}
	if s.DiskRoot != "" {
		out = append(out, checkDisk("disk "+s.Name, s.DiskRoot, st, c))
	}
	return out
}

// diskFacts are a file system's free space and inodes, and what the
// stream still holds for the sink on it.
type diskFacts struct {
	dir                    string
	free, total            int64
	freeFiles, totalFiles  int64
	needBytes, needEntries int64 // what the stream holds for the sink, at least
}

func checkDisk(check, root string, st *streamFacts, c *consumerFacts) Result {
	dir := root
	for { // the nearest directory that exists: a sink not written yet
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) || filepath.Dir(dir) == dir {
			break
		}
		dir = filepath.Dir(dir)
	}
	var sf syscall.Statfs_t
	if err := syscall.Statfs(dir, &sf); err != nil {
		return fail(check, "", "statfs %s: %v", dir, err)
	}
	f := diskFacts{
		dir:  root,
		free: int64(sf.Bavail) * sf.Bsize, total: int64(sf.Blocks) * sf.Bsize,
		freeFiles: int64(sf.Ffree), totalFiles: int64(sf.Files),
	}
	if st != nil {
		state := st.info.State
		behind := state.Msgs
		if c != nil {
			behind = c.Pending + uint64(max(c.AckPending, 0))
		}
		f.needEntries = int64(behind)
		if state.Msgs > 0 {
			f.needBytes = int64(float64(state.Bytes) / float64(state.Msgs) * float64(behind))
		}
	}
	return judgeDisk(check, f)
}

// judgeDisk: room for what the stream holds for the sink (every event
// writes at least its payload and one file), and a margin beyond it.
func judgeDisk(check string, f diskFacts) Result {
	space := fmt.Sprintf("%s: %s free of %s, %d of %d inodes free; the stream holds %s in %d events for it", f.dir,
		progress.Bytes(f.free), progress.Bytes(f.total), f.freeFiles, f.totalFiles, progress.Bytes(f.needBytes), f.needEntries)
	const fix = "free space on the sink's file system, or move the sink to a larger one"
	switch {
	case f.free < f.needBytes:
		return fail(check, fix, "%s: it does not fit", space)
	case f.totalFiles > 0 && f.freeFiles < f.needEntries:
		return fail(check, fix+" (with more inodes: mkfs -N, or a file system that allocates them)", "%s: too few inodes", space)
	case f.total > 0 && f.free < f.total/10:
		return warn(check, fix, "%s: under 10%% free", space)
	case f.totalFiles > 0 && f.freeFiles < f.totalFiles/10:
		return warn(check, fix, "%s: under 10%% of the inodes free", space)
	}
	return pass(check, "%s", space)
}
