// Package scheme tells a URL's scheme from a path, so that every place
// that reads a store's URL (sink.Parse, source.Open, a deployment's
// layers) refuses a mistyped scheme the same way instead of taking it as
// a relative path.
package scheme

import (
	"fmt"
	"strings"
)

// Of returns the scheme raw starts with ("s3" of "s3://b/p", "disk" of
// "disk:/x", "dsk" of "dsk:/x"), lower-cased; ok is false for a path
// (nothing before a colon, or a first character that is not a letter,
// as in "./dsk:x" or "/a:b").
func Of(raw string) (scheme string, ok bool) {
	i := strings.IndexByte(raw, ':')
	if i <= 0 {
		return "", false
	}
	for j, c := range raw[:i] {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", false
		}
	}
	return strings.ToLower(raw[:i]), true
}

// Check refuses raw when it starts with a scheme that is not one of
// known: what names the value in the error ("sink", "source"), and the
// error lists the schemes and how to write a path with a colon.
func Check(what, raw string, known ...string) error {
	s, ok := Of(raw)
	if !ok {
		return nil
	}
	for _, k := range known {
		if s == k {
			return nil
		}
	}
	return fmt.Errorf("%s %q: unknown scheme %q (known: %s; a path with a colon is written ./%s)",
		what, raw, s+":", strings.Join(known, ", "), raw)
}
