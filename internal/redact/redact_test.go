package redact

import (
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
