// Package compare checks a sink against its source of truth and repairs
// it. Verify reports every record of the source the sink lacks or holds
// differently; Reconcile reports the same and publishes the source's
// version of what is missing or older onto the event stream for the
// replicator to apply; Prune finds the resources only the sink holds and
// publishes their purges. The source and the sink are already open: they
// come in through the small interfaces declared here.
package compare

import (
	"fmt"
	"io"
)

// Scope says which kinds of record the sink does not keep (a Postgres
// meta store keeps no blobs, and revisions only if configured to), so
// that their absence is not a difference. The zero value expects every
// kind.
type Scope struct {
	NoRevisions bool
	NoBlobs     bool
}

// writeLine writes one line of human output to out, if any.
func writeLine(out io.Writer, format string, args ...any) {
	if out != nil {
		fmt.Fprintf(out, format+"\n", args...)
	}
}
