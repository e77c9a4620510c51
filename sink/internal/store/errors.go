package store

import (
	"errors"
	"fmt"
)

// InvalidError is a permanent problem with a record: retrying it can never
// succeed, so the caller sends it to the dead-letter queue instead.
// Everything else a sink returns (I/O errors above all) is transient.
type InvalidError struct {
	Key    string // what was refused, e.g. `resource_id "../x"` or `blob "99aa…"`
	Reason string // why, in a few words
}

// Error says what was refused and why.
func (e *InvalidError) Error() string {
	return fmt.Sprintf("sink: Invalid %s: %s", e.Key, e.Reason)
}

// IsInvalid reports whether err (or anything it wraps) is an *InvalidError,
// so a caller can route permanent failures to the dead-letter queue.
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}

// Invalid is the InvalidError refusing key for reason.
func Invalid(key, reason string) error { return &InvalidError{Key: key, Reason: reason} }

// Invalidf is Invalid with a formatted reason.
func Invalidf(key, format string, args ...any) error {
	return &InvalidError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// DroppedError is a Flush that failed for good on a record it refuses
// only when writing it (Err, an InvalidError), after dropping everything
// queued: the caller applies the records applied since the last Flush
// again one at a time, flushing each, to find the refused one (the
// others are written again, the idempotent writes they are).
type DroppedError struct{ Err error }

// Error is Err's message.
func (e *DroppedError) Error() string { return e.Err.Error() }

// Unwrap is Err, so IsInvalid holds for a DroppedError.
func (e *DroppedError) Unwrap() error { return e.Err }

// IsDropped reports whether err (or anything it wraps) is a DroppedError.
func IsDropped(err error) bool {
	var de *DroppedError
	return errors.As(err, &de)
}

// Refusal is a revision a sink refused only while making its batch
// durable, having written the rest of the batch (a uid another resource
// already holds, found where the stored rows are read): the caller
// dead-letters the event it came from rather than losing it silently.
type Refusal struct {
	ResourceID, RevisionID, UID string
	Err                         error // an *InvalidError saying why
}
