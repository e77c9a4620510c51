package sink

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

func (e *InvalidError) Error() string {
	return fmt.Sprintf("sink: invalid %s: %s", e.Key, e.Reason)
}

// IsInvalid reports whether err (or anything it wraps) is an *InvalidError,
// so a caller can route permanent failures to the dead-letter queue.
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}

func invalid(key, reason string) error { return &InvalidError{Key: key, Reason: reason} }

func invalidf(key, format string, args ...any) error {
	return &InvalidError{Key: key, Reason: fmt.Sprintf(format, args...)}
}
