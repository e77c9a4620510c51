// Package redact hides the password of a URL, for logs and messages. It
// is a leaf package so that both the sources and the sinks can show their
// URLs without importing each other.
package redact

import "net/url"

// URL hides raw's password, if it has one, so the URL can be logged.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
