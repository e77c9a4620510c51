package redact

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestURLHidesEverySecret (issue 12, item 15): a password= query
// parameter was shown in logs, in status and in the JetStream consumer's
// description, and a URL that did not parse was echoed whole.
func TestURLHidesEverySecret(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:S3cret@db:5432/app?sslmode=disable", "postgres://app:xxxxx@db:5432/app?sslmode=disable"},
		{"postgres://app@db/app?password=S3cret&sslmode=require", "postgres://app@db/app?password=xxxxx&sslmode=require"},
		{"postgres://db/app?sslpassword=S3cret&table_prefix=p_", "postgres://db/app?sslpassword=xxxxx&table_prefix=p_"},
		{"s3://bucket/p/?endpoint=http%3A%2F%2Fh&aws_secret_access_key=S3cret&region=r", "s3://bucket/p/?endpoint=http%3A%2F%2Fh&aws_secret_access_key=xxxxx&region=r"},
		{"nats://u:S3cret@h:4222", "nats://u:xxxxx@h:4222"},
		{"nats://S3cret@h:4222", "nats://xxxxx@h:4222"}, // a token
		{"tls://S3cret@h:4222", "tls://xxxxx@h:4222"},
		{"host=db user=app password=S3cret dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password='S3 cret' dbname=app", "host=db password=xxxxx dbname=app"},
		{"disk:/srv/mirror?sync=batch", "disk:/srv/mirror?sync=batch"},
		{"/srv/mirror", "/srv/mirror"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Unparseable URLs still lose their secrets.
	for _, in := range []string{
		"postgres://app:S3cret@db:port/app",         // bad port
		"postgres://app:S3cret@db/app%zz",           // bad escape
		"postgres://app:S3cret@db/app?password=%zz", // bad query escape, parsed leniently
		"postgres://app:pa ss S3cret@db/app\x7f",
	} {
		if got := URL(in); strings.Contains(got, "S3cret") {
			t.Errorf("URL(%q) = %q shows the secret", in, got)
		}
	}
}

// malformedURLs are URLs a user may mistype, each holding the password
// (or token) S3cretPw.
var malformedURLs = []string{
	"nats://bob:S3cretPw/w#rd?x%@127.0.0.1:14227", // issue 23, item 6: the reported shape
	"nats://bob:p@ss/w#rd?x%S3cretPw@127.0.0.1:14227",
	"nats://bob:S3cretPw%@127.0.0.1:4222",
	"nats://bob:S3cretPw%zz@127.0.0.1:4222",
	"nats://bob:%S3cretPw@127.0.0.1:4222",
	"nats://bob:S3cretPw@127.0.0.1:notaport",
	"nats://bob:S3cretPw@[::1",
	"nats://S3cretPw%zz@127.0.0.1:4222",
	"nats://S3cretPw@127.0.0.1:4222/%zz",
	"tls://bob:S3cretPw@h:4222\x7f",
	"nats://bob:S3cret%50w@h:4222%",
	"nats://a:b@h:1,nats://bob:S3cretPw%@h:2",
	" nats://bob:S3cretPw@h:4222",
	"nats://bob:S3cretPw@h:4222?x=%",
}

// TestErrorHidesThePassword (issue 23, item 6): url.Parse's error quoted a
// malformed NATS URL whole, password included.
func TestErrorHidesThePassword(t *testing.T) {
	for _, raw := range malformedURLs {
		_, perr := url.Parse(strings.TrimSpace(strings.Split(raw, ",")[1%len(strings.Split(raw, ","))]))
		if perr == nil {
			_, perr = url.Parse(raw)
		}
		if perr == nil {
			perr = fmt.Errorf("parse %q: something else", raw)
		}
		got := Error(fmt.Errorf("connect: %w", perr), raw).Error()
		if strings.Contains(got, "S3cretPw") || strings.Contains(got, "S3cretPw"[:6]) {
			t.Errorf("Error for %q = %q shows the password", raw, got)
		}
	}
}

// FuzzErrorHidesThePassword: whatever surrounds user:password@, the
// error url.Parse gives never shows the password once through Error.
func FuzzErrorHidesThePassword(f *testing.F) {
	f.Add("nats://", "bob", "p@ss/w#rd?x%", "127.0.0.1:14227")
	f.Add("tls://", "", "%zz", "[::1")
	f.Add("", "u", "S3cret", "h:port")
	f.Fuzz(func(t *testing.T, scheme, user, pass, host string) {
		if len(pass) < 3 || strings.Contains(host, "@") || strings.Contains(scheme+user+host, pass) || strings.Contains(user, ":") {
			return
		}
		raw := scheme + user + ":" + pass + "@" + host
		_, err := url.Parse(raw)
		if err == nil {
			err = fmt.Errorf("dial %q: refused", raw)
		}
		if got := Error(err, raw).Error(); strings.Contains(got, pass) {
			t.Errorf("Error for %q = %q shows the password", raw, got)
		}
	})
}
