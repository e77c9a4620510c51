// Package redact hides the credentials in a URL or connection string, for
// logs, messages and status output. It is a leaf package so that both the
// sources and the sinks can show their URLs without importing each other.
package redact

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every secret that URL hides.
const Mask = "xxxxx"

// secretParam matches the names of query parameters (and of a libpq
// keyword/value connection string's keywords) that carry a secret:
// password=, sslpassword=, token=, secret=, and any *_key or *secret*
// (access keys, session tokens).
var secretParam = regexp.MustCompile(`(?i)^(.*password.*|.*passwd.*|.*secret.*|.*token.*|.*_key|.*access_?key.*|sig|signature|x-amz-credential|credentials?)$`)

// isNATS reports whether scheme is a NATS URL's, whose userinfo without
// a password is a token (nats://TOKEN@host), not a user name.
func isNATS(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "nats", "tls", "ws", "wss":
		return true
	}
	return false
}

// URL hides raw's secrets so it can be shown: the password of its
// userinfo (the whole userinfo of a NATS URL, which may be a token), the values of secret-bearing query parameters, and the
// password= of a keyword/value connection string. A string that does not
// parse as a URL is scrubbed of anything that looks like a credential
// rather than echoed whole.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme == "" && strings.Contains(raw, "=")) {
		return scrub(raw)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
		} else if isNATS(u.Scheme) {
			u.User = url.User(Mask) // a NATS URL's lone userinfo is a token
		}
	}
	u.RawQuery = query(u.RawQuery)
	return u.String()
}

// query masks the values of secret parameters, keeping the others and
// their order exactly.
func query(raw string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if ok && secretParam.MatchString(name) {
			parts[i] = k + "=" + Mask
		}
	}
	return strings.Join(parts, "&")
}

// credentialish finds what scrub hides in a string that is not a URL:
// userinfo before an @ after "://", and key=value pairs whose key names a
// secret (values quoted or up to a separator).
var (
	userinfo = regexp.MustCompile(`://[^/?#@]*@`)
	keyValue = regexp.MustCompile(`(?i)\b([a-z0-9_.-]*(?:password|passwd|secret|token|_key|accesskey|access_key)[a-z0-9_.-]*)\s*=\s*('[^']*'|"[^"]*"|[^&\s]*)`)
)

func scrub(raw string) string {
	out := userinfo.ReplaceAllString(raw, "://"+Mask+"@")
	return keyValue.ReplaceAllString(out, "${1}="+Mask)
}

// ParseError is err from url.Parse without the URL it quotes (which may
// hold a password): only the reason, for the caller to name the URL
// redacted.
func ParseError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Error is err, about the URL or connection string raw, with no
// credential of raw in its text: a url.Error loses the URL it quotes, a
// URL with userinfo loses every quoted fragment of the reason (url.Parse
// quotes the bytes it stumbled on, which may be the password's), and any
// userinfo part of three bytes or more still found in the text is
// masked. It unwraps to err, so errors.Is still sees the cause.
func Error(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := ParseError(err).Error()
	secrets := userSecrets(raw)
	if len(secrets) > 0 {
		msg = quoted.ReplaceAllString(msg, `"`+Mask+`"`)
	}
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, Mask)
		}
	}
	return &redactedError{msg: msg, err: err}
}

// quoted matches a Go-quoted fragment of an error's text.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// userSecrets are the userinfo of every comma-separated URL of raw, taken
// leniently (everything between "://" and the last "@", since a malformed
// password may hold "/", "#" or "@"), and its password apart, raw and
// unescaped.
func userSecrets(raw string) []string {
	var out []string
	for _, one := range strings.Split(raw, ",") {
		if _, rest, ok := strings.Cut(one, "://"); ok {
			one = rest
		}
		at := strings.LastIndex(one, "@")
		if at < 0 {
			continue
		}
		info := one[:at]
		parts := []string{info} // a token, or user:password
		if _, pass, ok := strings.Cut(info, ":"); ok {
			parts = append(parts, pass)
		}
		for _, p := range parts {
			out = append(out, p)
			if u, err := url.PathUnescape(p); err == nil && u != p {
				out = append(out, u)
			}
		}
	}
	return out
}
