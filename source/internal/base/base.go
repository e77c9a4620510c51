// Package base holds what the source package shares with its backends
// (source/archive, source/postgres, source/s3): the record they yield and
// URL redaction. It exists so that the root package can alias these and
// still import the backends without an import cycle.
package base

import (
	"context"
	"iter"

	"github.com/specstar/replicator/internal/redact"

	"github.com/specstar/replicator/events"
)

// Record is one record a source yields, with the model it belongs to and
// where in the source it was found; every backend yields these, so that
// verify, reconcile and the writer read any source alike.
type Record struct {
	// Model is the model the record belongs to.
	Model string
	// Record is the DumpRecord: a MetaRecord, RevisionRecord, BlobRecord
	// or BlobRefRecord.
	Record events.Record
	// Where says where the source holds it, for messages (e.g. "frame 3
	// at offset 450", "postgres meta").
	Where string
	// Payload is the record's exact bytes where the source has them (an
	// archive frame); nil means the record is re-encoded when needed.
	Payload []byte
}

// Source is what every backend implements: the records of one consistent
// reading of what it holds. It is declared here so that backends can state
// that they implement source.Source without importing the root.
type Source interface {
	// Records yields every record, in the source's order, then stops; an
	// error ends the sequence. Connections are held only while iterating.
	Records(ctx context.Context) iter.Seq2[Record, error]
}

// Redact hides a URL's password, for logs; every backend names its URL in
// errors through it.
func Redact(raw string) string { return redact.URL(raw) }
