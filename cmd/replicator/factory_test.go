package main

import (
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/testsize"
)

// TestFactoryCrashAndResume kills the replicator (SIGKILL) while it
// drains into SpecStar's all-S3 factory, restarts it each time, and checks
// that the factory then verifies equal to the archive: a meta.db upload
// cut short, or never made, is repaired by the redelivered batch, and no
// meta is left behind or doubled.
func TestFactoryCrashAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and drains an archive several times")
	}
	bin := buildReplicator(t)
	srv := s3test.Start(t)
	srv.CreateBucket(t, "crash")
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	factory := benchS3URL(srv, "crash", "app/") + "&factory=s3&name=crashy"
	archive := filepath.Join(t.TempDir(), "crash.acbak")
	if err := writeArchive(archive, testsize.Of(60, 600)); err != nil {
		t.Fatal(err)
	}
	bus := testBus(t)
	replay(t, bus, archive)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills, wantKills := 0, testsize.Of(2, 4)
	for i := 0; i < wantKills+2 && kills < wantKills; i++ {
		cmd := exec.Command(bin, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--batch", "32", "--ack-wait", "3s", "--to", factory)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if killPartway(t, bus, cmd, rng) {
			kills++
		}
	}
	if kills == 0 {
		t.Fatal("the replicator always finished before it could be killed; enlarge the archive")
	}
	if code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--ack-wait", "3s", "--to", factory); code != exitOK {
		t.Fatalf("final run: %d\n%s%s", code, out, errs)
	}
	code, out, errs := runCmd(t, "verify", "--from", archive, "--to", factory)
	if code != exitOK || !strings.Contains(out, "equal") {
		t.Fatalf("verify after %d kills: exit %d\n%s%s", kills, code, out, errs)
	}
	t.Logf("killed %d times; %s", kills, strings.TrimSpace(out))
}
