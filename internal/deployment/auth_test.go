package deployment

import (
	"flag"
	"testing"
)

// TestNATSAuthKeys: the nats section takes the credential and TLS flags
// by name, ${VAR} included, and fills the flags the command line left
// unset (a flag given there wins).
func TestNATSAuthKeys(t *testing.T) {
	t.Setenv("TEST_NATS_TOKEN", "t0ken")
	c, err := Parse("auth.yaml", []byte(`
nats:
  url: tls://${TEST_NATS_TOKEN}@nats:4222
  nats-creds: /etc/nats/app.creds
  nats-nkey: /etc/nats/app.nk
  tls-ca: /etc/nats/ca.pem
  tls-cert: /etc/nats/client.pem
  tls-key: /etc/nats/client-key.pem
`))
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	got := map[string]*string{}
	for _, name := range []string{"nats", "nats-creds", "nats-nkey", "tls-ca", "tls-cert", "tls-key"} {
		got[name] = fs.String(name, "", "")
	}
	if err := fs.Parse([]string{"--tls-key", "/cli/key.pem"}); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyFlags(fs); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"nats": "tls://t0ken@nats:4222", "nats-creds": "/etc/nats/app.creds", "nats-nkey": "/etc/nats/app.nk",
		"tls-ca": "/etc/nats/ca.pem", "tls-cert": "/etc/nats/client.pem", "tls-key": "/cli/key.pem",
	} {
		if *got[name] != want {
			t.Errorf("--%s = %q, want %q", name, *got[name], want)
		}
	}
}
