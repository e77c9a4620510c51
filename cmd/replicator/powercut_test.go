package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/lazyfs"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/stream"
)

// The bus host's environment: its data directory and --sync-interval.
const (
	hostBusEnv  = "SPECSTAR_TEST_HOST_BUS"
	hostSyncEnv = "SPECSTAR_TEST_HOST_SYNC"
)

func hostBusDir() string { return os.Getenv(hostBusEnv) }

// hostBus runs the embedded JetStream server of dir the way every command
// starts it (stream.Open), prints "ready", and serves until killed: a
// process that holds the bus without consuming from it, as a source's
// `writer tail` does while an archive is replayed beside it.
func hostBus(dir string) {
	interval, err := time.ParseDuration(os.Getenv(hostSyncEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", hostSyncEnv, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	bus, err := stream.Open(ctx, stream.Config{DataDir: dir, SyncInterval: interval}, quietLog())
	if err != nil {
		fmt.Fprintf(os.Stderr, "host bus: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	<-ctx.Done()
	bus.Close()
}

// TestPowerCutEmbedded cuts the power under the embedded server, the
// product's default bus: its stream files on lazyfs, `writer replay`
// reports medium.acbak's events stored, the host is stopped, the
// unsynced writes are thrown away, the host is killed. After the
// restart, `replicator run --until-drained` must mirror every event that
// was reported stored: `verify` against the archive finds nothing
// missing. With --sync-interval 2m (nats-server's own default) the same
// cut must lose events, or the cut is not a cut.
func TestPowerCutEmbedded(t *testing.T) {
	t.Parallel() // seconds of waiting on processes: overlaps the package's other slow tests
	archive := testfixtures.Path(t, "medium.acbak")
	replBin := buildReplicator(t)
	writerBin := buildWriter(t)
	for _, tc := range []struct {
		name     string
		interval time.Duration
		wantLoss bool
	}{
		{"default", 0, false},
		{"sync-interval-2m", 2 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "bus")
			storeDir, backing := filepath.Join(dataDir, "jetstream"), t.TempDir()
			if err := os.MkdirAll(storeDir, 0o700); err != nil {
				t.Fatal(err)
			}
			disk := mountLazy(t, storeDir, backing)

			host := exec.Command(os.Args[0])
			host.Env = append(os.Environ(), hostBusEnv+"="+dataDir, hostSyncEnv+"="+tc.interval.String())
			out, err := host.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var hostErr lockedBuffer
			host.Stderr = &hostErr
			if err := host.Start(); err != nil {
				t.Fatal(err)
			}
			defer host.Process.Kill()
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("bus host: %q, %v\n%s", line, err, hostErr.String())
			}

			rout, err := exec.Command(writerBin, "replay", "--data-dir", dataDir, "--json", archive).Output()
			if err != nil {
				t.Fatalf("writer replay: %v\n%s", err, rout)
			}
			var replayed struct{ Stored int64 }
			if err := json.Unmarshal(rout, &replayed); err != nil || replayed.Stored == 0 {
				t.Fatalf("writer replay reported %q (%v): want events stored", rout, err)
			}

			// The power cut: nothing runs between the last write and the
			// loss of what was not synced.
			if err := host.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			lost, err := disk.Cut()
			if err != nil {
				t.Fatal(err)
			}
			host.Process.Kill()
			host.Wait()
			if err := disk.Unmount(); err != nil {
				t.Fatal(err)
			}
			mountLazy(t, storeDir, backing)
			t.Logf("%d events stored; the cut threw away %d bytes in %d files", replayed.Stored, lost.Bytes, lost.Files)

			mirror := t.TempDir()
			run, err := exec.Command(replBin, "run", "--data-dir", dataDir, "--until-drained", "--unavailable-timeout", "30s", "--sink", mirror+"?name=powercut").CombinedOutput()
			t.Logf("replicator run after the restart: %v\n%s", err, run)
			vout, verr := exec.Command(replBin, "verify", "--from", archive, "--to", mirror, "--json").Output()
			var v struct {
				Equal       bool
				Differences int
			}
			if err := json.Unmarshal(vout, &v); err != nil {
				t.Fatalf("verify printed %q (%v): %v", vout, verr, err)
			}
			switch {
			case !tc.wantLoss && (err != nil || !v.Equal):
				t.Errorf("after the power cut the mirror has %d differences from the %d events reported stored (run: %v)\n%s", v.Differences, replayed.Stored, err, vout)
			case tc.wantLoss && v.Equal:
				t.Errorf("with sync every %v the cut lost nothing (%d bytes thrown away): the test does not cut what the server has not synced", tc.interval, lost.Bytes)
			case tc.wantLoss:
				t.Logf("as expected, sync every %v loses acknowledged events: %d differences; run said:\n%s", tc.interval, v.Differences, strings.TrimSpace(string(run)))
			}
		})
	}
}

// mountLazy mounts a lazyfs of backing on dir for the rest of the test.
func mountLazy(t *testing.T, dir, backing string) *lazyfs.FS {
	t.Helper()
	fs, err := lazyfs.Mount(dir, backing)
	if err != nil {
		t.Fatalf("power-cut tests need FUSE (root and /dev/fuse; .ci/run installs fuse3): %v", err)
	}
	t.Cleanup(func() { fs.Unmount() })
	return fs
}
