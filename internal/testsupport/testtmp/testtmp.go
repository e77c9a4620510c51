// Package testtmp gives each test binary a temporary directory of its own
// and removes what earlier runs left behind when they were killed (by go
// test's -timeout, a signal or a crash), so that no test run leaves files
// or throwaway servers behind.
//
// A package's TestMain calls Main. Everything the tests create with
// t.TempDir or os.MkdirTemp("", ...), and everything the processes they
// start put in $TMPDIR, then lands in that one directory.
package testtmp

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/freeport"
	"golang.org/x/sys/unix"
)

// lockName is the file each run holds an exclusive flock on for its whole
// life; a run directory whose lock can be taken belongs to a dead run.
const lockName = ".lock"

// Main runs the package's tests with TMPDIR set to a fresh run directory
// under Base, after sweeping the run directories of runs that died, and
// removes the run directory when the tests end. It exits with the tests'
// status.
func Main(m *testing.M) {
	os.Exit(run(m))
}

// Base is the directory that holds every test run's directory, under the
// temporary directory the run started with: one per user, so that two
// users' runs never meet.
func Base() string {
	return filepath.Join(os.TempDir(), "specstar-tests-"+strconv.Itoa(os.Getuid()))
}

func run(m *testing.M) int {
	base := Base() // before TMPDIR points into it
	dir, release, err := enter(base)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testtmp: %v\n", err)
		return 2
	}
	old, had := os.LookupEnv("TMPDIR")
	os.Setenv("TMPDIR", dir)
	os.Setenv(freeport.BaseEnv, base) // port locks meet across test binaries
	code := m.Run()
	if had {
		os.Setenv("TMPDIR", old)
	} else {
		os.Unsetenv("TMPDIR")
	}
	release()
	return code
}

// enter sweeps base of dead runs and makes a locked run directory in it.
// release removes the run directory and drops the lock.
func enter(base string) (dir string, release func(), err error) {
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", nil, fmt.Errorf("test directory %s: %w", base, err)
	}
	Sweep(base)
	dir, err = os.MkdirTemp(base, "run-")
	if err != nil {
		return "", nil, fmt.Errorf("test directory in %s: %w", base, err)
	}
	// Throwaway Postgres clusters run as the postgres user, which must be
	// able to reach their directories below this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("test directory %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("test directory lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return "", nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	return dir, func() {
		stopClusters(dir)
		os.RemoveAll(dir)
		lock.Close()
	}, nil
}

// Sweep removes the run directories under base whose run is gone (their
// lock is free), first stopping any Postgres cluster a killed test left
// running in them. Directories of live runs are left alone.
func Sweep(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(base, e.Name())
		if !e.IsDir() {
			continue
		}
		if !stale(p) {
			continue
		}
		stopClusters(p)
		os.RemoveAll(p)
	}
}

// stale reports whether no live run holds dir's lock. A directory without
// a lock file is stale once it is an hour old (a run killed between
// creating the directory and its lock).
func stale(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
	if err != nil {
		st, err := os.Stat(dir)
		return err == nil && time.Since(st.ModTime()) > time.Hour
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return true
}

// stopClusters stops every Postgres cluster whose data directory lies
// below dir (a postmaster.pid names a running one), as pgtest starts them.
func stopClusters(dir string) {
	var datas []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && depth(dir, p) > 4 {
			return filepath.SkipDir
		}
		if d.Name() == "postmaster.pid" {
			datas = append(datas, filepath.Dir(p))
		}
		return nil
	})
	if len(datas) == 0 {
		return
	}
	pgctls, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(pgctls) == 0 {
		return
	}
	for _, data := range datas {
		args := []string{pgctls[len(pgctls)-1], "-D", data, "-m", "immediate", "stop"}
		if os.Geteuid() == 0 {
			if _, err := user.Lookup("postgres"); err == nil {
				args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
			}
		}
		exec.Command(args[0], args[1:]...).Run()
	}
}

func depth(root, p string) int {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." {
		return 0
	}
	n := 1
	for _, c := range rel {
		if c == filepath.Separator {
			n++
		}
	}
	return n
}
