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
