package stream

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// tempDirPrefix names the throw-away data directories of TempDataDir.
const tempDirPrefix = "specstar-mirror-"

// TempDataDir makes a throw-away data directory for an embedded server
// (replicator mirror's stream, as large as the archive) under the
// temporary directory, after removing those that killed runs left
// behind: a directory whose server lock no process holds. The caller
// removes the directory when done.
func TempDataDir() (string, error) {
	base := os.TempDir()
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), tempDirPrefix) {
			p := filepath.Join(base, e.Name())
			if abandoned(p) {
				os.RemoveAll(p)
			}
		}
	}
	dir, err := os.MkdirTemp(base, tempDirPrefix)
	if err != nil {
		return "", fmt.Errorf("throw-away stream directory: %w", err)
	}
	return dir, nil
}

// abandoned reports whether no embedded server runs on dir: its lock file
// can be locked, or it has none and is an hour old (a run killed before
// its server started).
func abandoned(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR, 0)
	if err != nil {
		st, serr := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist) && serr == nil && time.Since(st.ModTime()) > time.Hour
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}
