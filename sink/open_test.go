package sink_test

import (
	"strings"
	"testing"

	"github.com/specstar/replicator/sink"
)

// A word before a colon that is no sink's scheme is refused with the list
// of schemes, not taken as a relative path (issue 25: --to dsk:/tmp/m5
// made ./dsk:/tmp/m5); ./ keeps a path with a colon a path.
func TestParseRefusesUnknownScheme(t *testing.T) {
	for _, raw := range []string{"dsk:/tmp/m5", "gs://b/p", "Disc:x"} {
		_, err := sink.Parse(raw)
		if err == nil || !strings.Contains(err.Error(), "unknown scheme") || !strings.Contains(err.Error(), "disk, postgres, postgresql, s3, redis, rediss") {
			t.Errorf("Parse(%q): error %v, want unknown scheme with the list", raw, err)
		}
	}
	s, err := sink.Parse("./dsk:/tmp/m5")
	if err != nil || s.Kind != "disk" {
		t.Fatalf("Parse(./dsk:/tmp/m5) = %+v, %v; want a disk sink", s, err)
	}
}
