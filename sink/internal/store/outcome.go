package store

import "fmt"

// Outcome tells the caller what an Apply call did, so that replays and
// out-of-order deliveries can be counted and acknowledged as no-ops.
type Outcome int

const (
	// Written means something was written (the record was new or newer).
	Written Outcome = iota + 1
	// Unchanged means the sink already held exactly this record.
	Unchanged
	// Stale means the sink holds a newer version (an older meta, an older
	// draft uid of a revision, the pre-migration version of a revision):
	// nothing was written.
	Stale
	// Skipped means OnDuplicate "skip" left an existing meta, or a revision
	// of such a resource, alone.
	Skipped
)

// String names the outcome, for logs and metrics labels.
func (o Outcome) String() string {
	switch o {
	case Written:
		return "written"
	case Unchanged:
		return "unchanged"
	case Stale:
		return "stale"
	case Skipped:
		return "skipped"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}
