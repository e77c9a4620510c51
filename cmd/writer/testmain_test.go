package main

import (
	"flag"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testtmp"
)

// TestMain keeps every temporary file of this package's tests, and of the
// processes they start, in one run directory that is removed at the end
// (or swept by the next run, when this one is killed). The tests that
// call t.Parallel each run their own Postgres cluster, S3 server and
// stream and spend most of their time waiting for them, so up to four run
// at once unless -parallel says otherwise.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", "4")
	}
	testtmp.Main(m)
}
