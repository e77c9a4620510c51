package events

import (
	"fmt"
	"unicode/utf8"
)

// Bounds on the identifiers an event carries. NATS refuses a message whose
// protocol line (subject, reply, sizes) exceeds 4096 bytes, and JetStream
// one whose headers exceed 64 KiB; the model travels escaped in the
// subject and raw in a header, the resource, revision and file ids raw in
// headers, and a dead letter adds the subject and a reason to them. These
// bounds keep every event and its dead letter inside both limits. They are
// checked, not mapped: writer verify refuses a longer name with the
// reason, and EnvelopeFor will not build its event.
const (
	// MaxModelToken is the longest escaped model name (SubjectToken) a
	// subject carries.
	MaxModelToken = 2048
	// MaxIDBytes is the longest resource, revision or file id a header
	// carries.
	MaxIDBytes = 4096
)

// CheckModelName checks that a model name is one SpecStar could have
// written (a Python str: valid UTF-8) and that fits a subject.
func CheckModelName(model string) error {
	if !utf8.ValidString(model) {
		return fmt.Errorf("model %s: not valid UTF-8 (SpecStar names are text)", QuoteBounded(model))
	}
	if n := len(SubjectToken(model)); n > MaxModelToken {
		return fmt.Errorf("model %s: %d bytes escaped, longer than the %d a subject may carry", QuoteBounded(model), n, MaxModelToken)
	}
	return nil
}

// CheckID checks an identifier (what names it: "resource_id",
// "revision_id", "file_id") the way CheckModelName checks a model, against
// MaxIDBytes.
func CheckID(what, id string) error {
	if !utf8.ValidString(id) {
		return fmt.Errorf("%s %s: not valid UTF-8 (SpecStar ids are text)", what, QuoteBounded(id))
	}
	if len(id) > MaxIDBytes {
		return fmt.Errorf("%s %s: %d bytes, longer than the %d an event header may carry", what, QuoteBounded(id), len(id), MaxIDBytes)
	}
	return nil
}

// quoteMax is how many bytes of a name QuoteBounded quotes.
const quoteMax = 64

// QuoteBounded quotes s (%q) for an error message, at most its first 64
// bytes, saying how long it is when cut: an error quoting a hostile 20 KiB
// id would otherwise be four times its size.
func QuoteBounded(s string) string {
	if len(s) <= quoteMax {
		return fmt.Sprintf("%q", s)
	}
	cut := quoteMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}

// checkEnvelopeNames is EnvelopeFor's check that the names it puts in
// the subject and headers fit there (only their size: a name that is not
// UTF-8 is published, for the sinks to dead-letter with the reason).
func checkEnvelopeNames(model string, ids ...[2]string) error {
	if n := len(SubjectToken(model)); n > MaxModelToken {
		return fmt.Errorf("model %s: %d bytes escaped, longer than the %d a subject may carry", QuoteBounded(model), n, MaxModelToken)
	}
	for _, id := range ids {
		if len(id[1]) > MaxIDBytes {
			return fmt.Errorf("%s %s: %d bytes, longer than the %d an event header may carry", id[0], QuoteBounded(id[1]), len(id[1]), MaxIDBytes)
		}
	}
	return nil
}
