package deployment

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"net/url"
	"testing"
)

// TestSubstitutedSecretsStayInTheirPart (issue 12, item 15): ${VAR}
// values were substituted unescaped, so a password holding "/" or "@"
// split the URL and the rest of it was taken as a host name and resolved.
// A value in a userinfo or a query is now escaped for it; one in a path
// is left as it is.
func TestSubstitutedSecretsStayInTheirPart(t *testing.T) {
	pw, sslpw, dir := "p/a@ss?#w:rd %", "a&b=c+d", "/srv/a b"
	t.Setenv("TEST_PW", pw)
	t.Setenv("TEST_SSLPW", sslpw)
	t.Setenv("TEST_DIR", dir)
	c, err := Parse("c.yaml", []byte("deployments:\n  prod:\n    meta: postgres://app:${TEST_PW}@db:5432/app?sslmode=require&sslpassword=${TEST_SSLPW}\n"+
		"  mirror:\n    url: disk:${TEST_DIR}/mirror\n"))
	if err != nil {
		t.Fatal(err)
	}
	prod, ok, err := c.Lookup("prod")
	if err != nil || !ok {
		t.Fatalf("lookup prod: %v %v", ok, err)
	}
	u, err := url.Parse(prod.Meta)
	if err != nil {
		t.Fatalf("the expanded URL does not parse: %v", err)
	}
	if got, _ := u.User.Password(); got != pw || u.User.Username() != "app" {
		t.Errorf("password %q (user %q), want %q", got, u.User.Username(), pw)
	}
	if u.Host != "db:5432" || u.Path != "/app" {
		t.Errorf("host %q path %q: the password split the URL", u.Host, u.Path)
	}
	if got := u.Query().Get("sslpassword"); got != sslpw || u.Query().Get("sslmode") != "require" {
		t.Errorf("sslpassword %q sslmode %q, want %q and require", got, u.Query().Get("sslmode"), sslpw)
	}
	mirror, _, err := c.Lookup("mirror")
	if err != nil {
		t.Fatal(err)
	}
	if mirror.Meta != "disk:"+dir+"/mirror" {
		t.Errorf("a path variable was changed: %q", mirror.Meta)
	}
}
