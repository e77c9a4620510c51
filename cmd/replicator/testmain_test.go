package main

import (
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testtmp"
)

// TestMain keeps every temporary file of this package's tests, and of the
// processes they start, in one run directory that is removed at the end
// (or swept by the next run, when this one is killed). Started with
// $SPECSTAR_TEST_HOST_BUS, the test binary is instead a bus host (see
// hostBus) that a power-cut test stops and kills.
func TestMain(m *testing.M) {
	if dir := hostBusDir(); dir != "" {
		hostBus(dir)
		return
	}
	testtmp.Main(m)
}
