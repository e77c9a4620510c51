// Package natstest starts real NATS servers with JetStream that require
// authentication or TLS, for the tests of connecting to a secured server:
// user/password, token, nkey, credentials (operator, account and user
// JWTs), and TLS with a CA and a client certificate, all generated here.
package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Kind is what a Server requires of its clients.
type Kind string

// The kinds of secured server.
const (
	UserPassword Kind = "user-password" // user:password in the URL
	Token        Kind = "token"         // token@ in the URL
	Nkey         Kind = "nkey"          // an nkey seed file (--nats-nkey)
	Creds        Kind = "creds"         // a credentials file (--nats-creds), operator mode
	TLS          Kind = "tls"           // TLS with a CA and a client certificate
)

// Kinds lists every kind, for table-driven tests.
var Kinds = []Kind{UserPassword, Token, Nkey, Creds, TLS}

// Server is a running secured server and what a client needs to connect.
type Server struct {
	// URL connects with the right credentials (user/password or token in
	// it for those kinds; tls:// for TLS).
	URL string
	// BadURL connects with wrong credentials where they ride in the URL
	// (a wrong password or token); else URL.
	BadURL string
	// Secret is what must never appear in output: the password, token or
	// seed.
	Secret string
	// Files are the client's files by flag name (nats-creds, nats-nkey,
	// tls-ca, tls-cert, tls-key).
	Files map[string]string
	// BadFiles are files by flag name that the server must refuse (another
	// user's seed or credentials, a certificate of another CA).
	BadFiles map[string]string
}

// Args are the command-line flags that give the client's files.
func (s *Server) Args() []string {
	var out []string
	for _, k := range []string{"nats-creds", "nats-nkey", "tls-ca", "tls-cert", "tls-key"} {
		if v, ok := s.Files[k]; ok {
			out = append(out, "--"+k, v)
		}
	}
	return out
}

// Start runs a server of the kind for the test's lifetime, with JetStream
// storage in a temporary directory, on a free loopback port.
func Start(t testing.TB, kind Kind) *Server {
	t.Helper()
	dir := t.TempDir()
	opts := &server.Options{
		ServerName: "natstest-" + string(kind),
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   filepath.Join(dir, "jetstream"),
		NoSigs:     true,
		NoLog:      true,
	}
	s := &Server{Files: map[string]string{}, BadFiles: map[string]string{}}
	scheme := "nats"
	switch kind {
	case UserPassword:
		opts.Username, opts.Password = "specstar", "pw-"+randomText(t)
		s.Secret = opts.Password
	case Token:
		opts.Authorization = "tok-" + randomText(t)
		s.Secret = opts.Authorization
	case Nkey:
		user, seed := newKey(t, nkeys.CreateUser)
		pub, _ := user.PublicKey()
		opts.Nkeys = []*server.NkeyUser{{Nkey: pub}}
		s.Files["nats-nkey"] = writeFile(t, dir, "user.nk", seed)
		_, other := newKey(t, nkeys.CreateUser)
		s.BadFiles["nats-nkey"] = writeFile(t, dir, "other.nk", other)
		s.Secret = string(seed)
	case Creds:
		s.operatorMode(t, dir, opts)
	case TLS:
		s.tls(t, dir, opts)
		scheme = "tls"
	default:
		t.Fatalf("natstest: unknown kind %q", kind)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: %s server: %v", kind, err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatalf("natstest: %s server did not start", kind)
	}
	addr := srv.Addr().(*net.TCPAddr)
	hostPort := net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port))
	u := url.URL{Scheme: scheme, Host: hostPort}
	bad := u
	switch kind {
	case UserPassword:
		u.User = url.UserPassword(opts.Username, opts.Password)
		bad.User = url.UserPassword(opts.Username, "wrong-"+opts.Password)
	case Token:
		u.User = url.User(opts.Authorization)
		bad.User = url.User("wrong-" + opts.Authorization)
	}
	s.URL, s.BadURL = u.String(), bad.String()
	return s
}

// operatorMode makes opts trust a fresh operator whose account (with
// JetStream) holds one user, and writes that user's credentials file; the
// bad one is a user of an account the server does not know.
func (s *Server) operatorMode(t testing.TB, dir string, opts *server.Options) {
	op, _ := newKey(t, nkeys.CreateOperator)
	opPub, _ := op.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "natstest"
	opJWT, err := oc.Encode(op)
	must(t, err)
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	must(t, err)

	resolver := &server.MemAccResolver{}
	account := func(name string, js bool) (nkeys.KeyPair, string) {
		acc, _ := newKey(t, nkeys.CreateAccount)
		accPub, _ := acc.PublicKey()
		ac := jwt.NewAccountClaims(accPub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		accJWT, err := ac.Encode(op)
		must(t, err)
		must(t, resolver.Store(accPub, accJWT))
		return acc, accPub
	}
	_, sysPub := account("SYS", false)
	acc, _ := account("APP", true)
	user := func(acc nkeys.KeyPair) []byte {
		u, seed := newKey(t, nkeys.CreateUser)
		uPub, _ := u.PublicKey()
		uc := jwt.NewUserClaims(uPub)
		uJWT, err := uc.Encode(acc)
		must(t, err)
		creds, err := jwt.FormatUserConfig(uJWT, seed)
		must(t, err)
		s.Secret = string(seed)
		return creds
	}
	// The bad user is signed by an account the operator never signed.
	stranger, _ := newKey(t, nkeys.CreateAccount)
	s.BadFiles["nats-creds"] = writeFile(t, dir, "stranger.creds", user(stranger))
	s.Files["nats-creds"] = writeFile(t, dir, "user.creds", user(acc))
	opts.TrustedOperators = []*jwt.OperatorClaims{opClaims}
	opts.AccountResolver = resolver
	opts.SystemAccount = sysPub
}

// tls makes opts require TLS with a client certificate signed by a fresh
// CA, and writes the CA, a client certificate and its key; the bad
// certificate is signed by another CA.
func (s *Server) tls(t testing.TB, dir string, opts *server.Options) {
	ca, caKey := newCA(t, "natstest CA")
	serverCert := newLeaf(t, ca, caKey, "127.0.0.1", true)
	clientCert := newLeaf(t, ca, caKey, "specstar-client", false)
	otherCA, otherKey := newCA(t, "stranger CA")
	strangerCert := newLeaf(t, otherCA, otherKey, "stranger", false)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	opts.TLS, opts.TLSVerify = true, true
	opts.TLSTimeout = 5
	opts.TLSConfig = &tls.Config{
		Certificates: []tls.Certificate{serverCert.pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	s.Files["tls-ca"] = writeFile(t, dir, "ca.pem", pemBlock("CERTIFICATE", ca.Raw))
	s.Files["tls-cert"] = writeFile(t, dir, "client.pem", clientCert.certPEM)
	s.Files["tls-key"] = writeFile(t, dir, "client-key.pem", clientCert.keyPEM)
	s.BadFiles["tls-ca"] = s.Files["tls-ca"]
	s.BadFiles["tls-cert"] = writeFile(t, dir, "stranger.pem", strangerCert.certPEM)
	s.BadFiles["tls-key"] = writeFile(t, dir, "stranger-key.pem", strangerCert.keyPEM)
	s.Secret = string(clientCert.keyPEM)
}

type leaf struct {
	pair            tls.Certificate
	certPEM, keyPEM []byte
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	return cert, key
}

func newLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, isServer bool) leaf {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if isServer {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	must(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	l := leaf{certPEM: pemBlock("CERTIFICATE", der), keyPEM: pemBlock("PRIVATE KEY", keyDER)}
	l.pair, err = tls.X509KeyPair(l.certPEM, l.keyPEM)
	must(t, err)
	return l
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func newKey(t testing.TB, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, []byte) {
	kp, err := create()
	must(t, err)
	seed, err := kp.Seed()
	must(t, err)
	return kp, seed
}

func writeFile(t testing.TB, dir, name string, b []byte) string {
	p := filepath.Join(dir, name)
	must(t, os.WriteFile(p, b, 0o600))
	return p
}

func randomText(t testing.TB) string {
	var b [12]byte
	_, err := rand.Read(b[:])
	must(t, err)
	return fmt.Sprintf("%x", b)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
}
