// Package pgtest starts throwaway PostgreSQL clusters for tests that need
// what the shared server (PG_DSN) lacks, such as wal_level=logical.
package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/freeport"
)

// LogicalCluster starts a throwaway Postgres cluster with
// wal_level=logical (the shared server at PG_DSN runs wal_level=replica)
// and returns its DSN (database "postgres", user "postgres", trust auth,
// 127.0.0.1 on a free port). It uses the newest
// /usr/lib/postgresql/*/bin/initdb and pg_ctl, run as the "postgres" OS
// user when the test runs as root (initdb refuses root). The cluster is
// stopped (pg_ctl stop -m immediate) and its directory removed when the
// test ends. It fails the test, never skips, when the cluster cannot be
// started.
func LogicalCluster(t testing.TB) string {
	t.Helper()
	return StartLogical(t).DSN
}

// Cluster is a running throwaway cluster.
type Cluster struct {
	// DSN connects to it as the superuser postgres.
	DSN     string
	data    string // the data directory
	restart func() error
}

// PostmasterPID is the cluster's postmaster process id, read from its
// postmaster.pid (so it is current after a Restart): benchmarks find the
// cluster's processes, and the CPU they use, from it.
func (c *Cluster) PostmasterPID() (int, error) {
	path := filepath.Join(c.data, "postmaster.pid")
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("postmaster pid: %w", err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("postmaster pid in %s: %w", path, err)
	}
	return pid, nil
}

// Restart stops the cluster (fast shutdown: connections are cut) and
// starts it again on the same port, as a database failover or upgrade
// would look to a client.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	if err := c.restart(); err != nil {
		t.Fatalf("restart the test cluster: %v", err)
	}
}

// StartLogical is LogicalCluster returning the Cluster, for tests that
// restart it.
func StartLogical(t testing.TB) *Cluster {
	t.Helper()
	initdbs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(initdbs) == 0 {
		t.Fatal("logical replication tests need a local PostgreSQL installation: no /usr/lib/postgresql/*/bin/initdb")
	}
	slices.SortFunc(initdbs, func(a, b string) int { return versionOf(a) - versionOf(b) })
	bin := filepath.Dir(initdbs[len(initdbs)-1])
	dir, err := os.MkdirTemp("", "specstar-pglogical-")
	if err != nil {
		t.Fatal(err)
	}
	var asUser []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			t.Fatalf("logical replication tests run as root need the OS user postgres to run initdb: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(args ...string) error {
		args = append(slices.Clone(asUser), args...)
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %v\n%s", args, err, out)
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	if err := run(filepath.Join(bin, "initdb"), "-D", data, "--auth=trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--no-locale"); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("cannot create a wal_level=logical test cluster: %v", err)
	}
	port := freeport.Take(t)
	opts := fmt.Sprintf("-c wal_level=logical -c max_replication_slots=4 -c max_wal_senders=4 -c port=%d "+
		"-c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c fsync=off", port, dir)
	if err := run(filepath.Join(bin, "pg_ctl"), "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		os.RemoveAll(dir)
		t.Fatalf("cannot start the wal_level=logical test cluster: %v\n%s", err, log)
	}
	t.Cleanup(func() {
		if err := run(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop"); err != nil {
			t.Errorf("stop the test cluster: %v", err)
		}
		os.RemoveAll(dir)
	})
	return &Cluster{
		DSN:  fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		data: data,
		restart: func() error {
			return run(filepath.Join(bin, "pg_ctl"), "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "-m", "fast", "-o", opts, "restart")
		},
	}
}

func versionOf(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}
