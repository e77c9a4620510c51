// Package freeport hands tests loopback ports for servers they start in
// other processes (nats-server, Postgres, versitygw), where the port has
// to be named before anything listens on it.
//
// Asking the kernel for port 0 and closing the listener is not enough:
// such a port comes from the ephemeral range, and any outgoing connection
// on the machine may take it before the server binds (CI saw nats-server
// fail with "address already in use" on its monitor port). Take picks
// below the ephemeral range instead, where the kernel never assigns on
// its own, and holds a lock file per port for the rest of the test so two
// test binaries running at once never pick the same one.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// BaseEnv names the directory the port locks live in; internal/testsupport/testtmp
// sets it to the directory shared by every test run, so that locks taken
// by different test binaries meet. Without it the temporary directory is
// used.
const BaseEnv = "SPECSTAR_TEST_BASE"

// Take returns a loopback port nothing listens on, outside the kernel's
// ephemeral range, reserved for this test until it ends.
func Take(tb testing.TB) int {
	tb.Helper()
	lo, hi := window()
	dir := os.Getenv(BaseEnv)
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("freeport: lock directory %s: %v", dir, err)
	}
	for range 200 {
		port := lo + rand.IntN(hi-lo)
		release, ok := lock(dir, port)
		if !ok {
			continue
		}
		if !bindable(port) {
			release()
			continue
		}
		tb.Cleanup(release)
		return port
	}
	tb.Fatalf("freeport: no free loopback port in %d-%d after 200 tries", lo, hi-1)
	return 0
}

// Addr is Take as a "127.0.0.1:port" address.
func Addr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Take(tb))
}

// window is the range Take picks from: the 16,384 ports just below the
// ephemeral range (from /proc; Linux's default when it cannot be read),
// never below 1024.
func window() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				hi = n
			}
		}
	}
	lo = max(hi-16384, 1024)
	return lo, hi
}

// lock takes the port's lock file without waiting; release drops it and
// removes the file so that nothing is left behind.
func lock(dir string, port int) (release func(), ok bool) {
	path := filepath.Join(dir, fmt.Sprintf("port-%d.lock", port))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { os.Remove(path); f.Close() }, true
}

// bindable reports whether a server could listen on the port now.
func bindable(port int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
