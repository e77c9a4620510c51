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
