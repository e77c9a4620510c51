package stream

// Connecting to a secured external NATS server: credentials files, nkey
// seeds and TLS, beside the user/password or token a --nats URL may carry
// (nats.go reads those from the URL itself). Kept apart from Open so that
// connection setup changes in one place.

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/specstar/replicator/internal/redact"
)

// Auth is how the commands authenticate to an external NATS server and
// secure the connection. Every field is a file name; empty fields are
// unused. It does not apply to the embedded server, which has its own
// token.
type Auth struct {
	// CredsFile is a NATS credentials file (a user JWT and its nkey seed),
	// for servers in operator/JWT mode (--nats-creds).
	CredsFile string
	// NkeyFile is a file holding a user nkey seed (SU...), for servers
	// that list nkeys in their authorization (--nats-nkey).
	NkeyFile string
	// TLSCA is the PEM file of the CAs that sign the server's certificate
	// (--tls-ca).
	TLSCA string
	// TLSCert and TLSKey are the client certificate and its key, for
	// servers that verify clients (--tls-cert, --tls-key).
	TLSCert, TLSKey string
}

// AuthFlags are the flag names Auth.Register defines, which are also the
// keys of a configuration file's nats section.
var AuthFlags = []string{"nats-creds", "nats-nkey", "tls-ca", "tls-cert", "tls-key"}

// Register defines the flags that fill a, for every command that takes
// --nats.
func (a *Auth) Register(fs *flag.FlagSet) {
	fs.StringVar(&a.CredsFile, "nats-creds", "", "NATS credentials file (user JWT and nkey seed) for an external server")
	fs.StringVar(&a.NkeyFile, "nats-nkey", "", "file holding a NATS user nkey seed (SU...) for an external server")
	fs.StringVar(&a.TLSCA, "tls-ca", "", "PEM file of the CA(s) that sign the NATS server's certificate")
	fs.StringVar(&a.TLSCert, "tls-cert", "", "PEM client certificate for a NATS server that verifies clients (with --tls-key)")
	fs.StringVar(&a.TLSKey, "tls-key", "", "PEM key of --tls-cert")
}

// RegisterMirror adds --mirror-of, --mirror-domain and --mirror-api-prefix,
// so that every command connecting in a mirror region takes the same
// flags with the same meaning.
func (c *Config) RegisterMirror(fs *flag.FlagSet) {
	fs.StringVar(&c.MirrorOf, "mirror-of", "", "the stream is a read-only mirror of this upstream stream (and its blob bucket), e.g. another region's SPECSTAR: created so by run, checked by every other command")
	fs.StringVar(&c.MirrorDomain, "mirror-domain", "", "JetStream domain of the --mirror-of stream (leaf-node regions): API prefix $JS.<domain>.API")
	fs.StringVar(&c.MirrorAPIPrefix, "mirror-api-prefix", "", "external JetStream API prefix of the --mirror-of stream (instead of --mirror-domain)")
}

// RegisterSyncInterval adds --sync-interval, the embedded server's flush
// policy (Config.SyncInterval), to a command that may host that server.
func (c *Config) RegisterSyncInterval(fs *flag.FlagSet) {
	fs.DurationVar(&c.SyncInterval, "sync-interval", 0, "embedded server: how often stream files are flushed to disk (0: before every acknowledgement, so acknowledged events survive a power cut; nats-server's own default is 2m)")
}

// IsZero reports whether no setting is given.
func (a Auth) IsZero() bool { return a == Auth{} }

// options turns a into nats.go options, checking first that each file it
// names can be read, so a typo is an error naming the flag and the file
// rather than a handshake failure. Errors never quote a file's content.
func (a Auth) options() ([]nats.Option, error) {
	var opts []nats.Option
	readable := func(flagName, path string) error {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("--%s: %w", flagName, err)
		}
		return f.Close()
	}
	if a.CredsFile != "" && a.NkeyFile != "" {
		return nil, errors.New("--nats-creds and --nats-nkey are exclusive: a credentials file holds its own nkey")
	}
	if a.CredsFile != "" {
		if err := readable("nats-creds", a.CredsFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.NkeyFile != "" {
		if err := readable("nats-nkey", a.NkeyFile); err != nil {
			return nil, err
		}
		o, err := nats.NkeyOptionFromSeed(a.NkeyFile)
		if err != nil {
			// nats.go's message names the file, not the seed.
			return nil, fmt.Errorf("--nats-nkey %s: %w", a.NkeyFile, err)
		}
		opts = append(opts, o)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	if a.TLSCA != "" {
		if err := readable("tls-ca", a.TLSCA); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		if err := readable("tls-cert", a.TLSCert); err != nil {
			return nil, err
		}
		if err := readable("tls-key", a.TLSKey); err != nil {
			return nil, err
		}
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return opts, nil
}

// looseSecrets names, one message each, the secret files of a (the
// credentials, the nkey seed, the TLS key) that group or others may read
// or write: used all the same, but said, as ssh does of a private key.
func (a Auth) looseSecrets() []string {
	var out []string
	for _, f := range []struct{ flag, path string }{{"nats-creds", a.CredsFile}, {"nats-nkey", a.NkeyFile}, {"tls-key", a.TLSKey}} {
		if f.path == "" {
			continue
		}
		st, err := os.Stat(f.path)
		if err != nil || st.Mode().Perm()&0o077 == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("--%s %s holds a secret and its permissions are %04o: others on this host may read it; chmod 600 it", f.flag, f.path, st.Mode().Perm()))
	}
	return out
}

// authOptions are the connection options of an external server: a's, and
// a check that a is not given for the embedded server, which would ignore
// it silently otherwise.
func (c *Config) authOptions() ([]nats.Option, error) {
	if c.URL == "" {
		if !c.Auth.IsZero() {
			return nil, errors.New("--nats-creds, --nats-nkey and --tls-* are for an external NATS server (--nats URL); the embedded server uses its own token")
		}
		return nil, nil
	}
	return c.Auth.options()
}

// connectError is err from nats.Connect, named with the redacted URL and,
// for an authentication or TLS failure, a hint at the settings involved.
// nats.go quotes a URL it cannot parse whole, password included
// (url.Parse's error), so err's text goes through redact.Error.
func connectError(url string, a Auth, err error) error {
	hint := ""
	msg := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		strings.Contains(msg, "authorization"), strings.Contains(msg, "authentication"):
		hint = " (the server refused the credentials: check the user/password or token in --nats, --nats-creds or --nats-nkey)"
	case strings.Contains(msg, "tls") || strings.Contains(msg, "x509") || strings.Contains(msg, "certificate"):
		hint = " (TLS failed: check --tls-ca, --tls-cert and --tls-key"
		if a.TLSCA == "" {
			hint += "; no --tls-ca given, so the system's CAs were used"
		}
		hint += ")"
	}
	return fmt.Errorf("connect to NATS at %s: %w%s", RedactURL(url), redact.Error(err, url), hint)
}
