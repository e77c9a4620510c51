package stream

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The embedded server proves who it is with a certificate of its own,
// kept in its 0700 data directory: a client of the embedded server (a
// process of the same user joining through the data directory) trusts
// only that certificate, so whoever else listens on the loopback port
// after the host dies (another local user, say) gets neither the token
// nor a chance to serve the client a stream of its own (a PurgeRecord
// deleting resources from the sink, issue 26 item 1).
const (
	certFile = "embedded.crt"
	keyFile  = "embedded.key" // mode 0600
)

// embeddedServerTLS returns the embedded server's certificate for dataDir,
// creating a self-signed one (ECDSA P-256, for 127.0.0.1, ::1 and
// localhost) when the directory has none. Only the process that holds the
// directory's lock calls it, so two processes never create one each.
func embeddedServerTLS(dataDir string) (*tls.Config, error) {
	crt, key := filepath.Join(dataDir, certFile), filepath.Join(dataDir, keyFile)
	pair, err := tls.LoadX509KeyPair(crt, key)
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeEmbeddedCert(crt, key); err != nil {
			return nil, err
		}
		pair, err = tls.LoadX509KeyPair(crt, key)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded NATS certificate %s: %w", crt, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// embeddedClientTLS is what a client of dataDir's embedded server
// verifies the server with: its certificate alone, not the system's roots.
func embeddedClientTLS(dataDir string) (*tls.Config, error) {
	crt := filepath.Join(dataDir, certFile)
	b, err := os.ReadFile(crt)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS certificate %s: %w", crt, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("embedded NATS certificate %s: no certificate in it", crt)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// writeEmbeddedCert creates the key (0600) and its self-signed
// certificate, each written to a temporary file and renamed into place.
func writeEmbeddedCert(crt, key string) error {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("embedded NATS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return fmt.Errorf("embedded NATS certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "specstar-embedded"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(20, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return fmt.Errorf("embedded NATS certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fmt.Errorf("embedded NATS key: %w", err)
	}
	if err := writePrivate(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return fmt.Errorf("embedded NATS key %s: %w", key, err)
	}
	if err := writePrivate(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return fmt.Errorf("embedded NATS certificate %s: %w", crt, err)
	}
	return nil
}

// writePrivate writes b to path (mode 0600) through a temporary file, so
// a reader sees the old contents or the new, never a part.
func writePrivate(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
