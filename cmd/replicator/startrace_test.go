package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testsize"
)

// TestProcessesStartedTogetherShareOneServer (issue 34, item 3): two
// processes started at the same instant on one embedded data directory
// raced: in 1 of 3 tries one exited 2 with "embedded NATS data dir ... is
// locked by another process that published no URL" (a review counted 2
// of 40 on a fresh directory, 3 of 40 on an existing one). Eight
// processes are started at once, on a fresh directory and again on the
// same one (once; 20 times under SPECSTAR_LONG); every one must end in
// one host and the rest joined, exit 0.
func TestProcessesStartedTogetherShareOneServer(t *testing.T) {
	t.Parallel() // seconds of waiting on processes: overlaps the package's other slow tests
	rounds := 1
	if testsize.Long() {
		rounds = 20
	}
	bin := buildReplicator(t)
	for round := range rounds {
		dataDir := filepath.Join(t.TempDir(), "nats")
		for _, dir := range []string{"fresh", "existing"} {
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failures []string
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var out bytes.Buffer
					cmd := exec.Command(bin, "run", "--data-dir", dataDir, "--until-drained", "--listen", "", "--to", filepath.Join(t.TempDir(), "sink"))
					cmd.Stdout, cmd.Stderr = &out, &out
					if err := cmd.Run(); err != nil {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("process %d: %v\n%s", i, err, out.String()))
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			for _, f := range failures {
				t.Errorf("round %d, %s directory: %s", round, dir, f)
			}
		}
	}
}
