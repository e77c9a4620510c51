package replicate

import (
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testtmp"
)

// TestMain keeps every temporary file of this package's tests in one run
// directory that is removed at the end (or swept by the next run, when
// this one is killed).
func TestMain(m *testing.M) { testtmp.Main(m) }
