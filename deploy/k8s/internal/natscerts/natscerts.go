// Package natscerts makes the TLS files of a region's NATS servers: a CA
// shared by the regions and a server certificate it signs, as the Secret
// nats-tls holds them (tls.crt, tls.key, ca.crt). certgen is its command;
// the deployment's tests use it to make the certificates they check.
package natscerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// DNSNames are the names the server certificate must hold: the client
// Service nats and the routes' pod names under nats-headless, short and
// qualified, and the leaf-node hosts.
func DNSNames(ns string, leaf []string) []string {
	names := []string{
		"nats", "nats." + ns, "nats." + ns + ".svc", "nats." + ns + ".svc.cluster.local",
		"*.nats-headless", "*.nats-headless." + ns, "*.nats-headless." + ns + ".svc", "*.nats-headless." + ns + ".svc.cluster.local",
	}
	return append(names, leaf...)
}

// Generate loads or makes the CA in caDir and writes a server
// certificate for names, valid for validity, into out.
func Generate(caDir, out string, names []string, validity time.Duration) error {
	ca, caKey, err := loadOrMakeCA(caDir)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("server key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "nats"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		DNSNames:     names,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("server certificate: %w", err)
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return fmt.Errorf("output directory %s: %w", out, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("server key: %w", err)
	}
	return writePEMs(out, map[string]*pem.Block{
		"tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "PRIVATE KEY", Bytes: keyDER},
		"ca.crt":  {Type: "CERTIFICATE", Bytes: ca.Raw},
	})
}

// loadOrMakeCA reads dir's ca.crt and ca.key, making both (a 10-year
// ECDSA P-256 CA) when dir holds neither.
func loadOrMakeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	crtPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	crtPEM, cerr := os.ReadFile(crtPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	switch {
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
		return makeCA(dir)
	case cerr != nil:
		return nil, nil, fmt.Errorf("CA certificate %s: %w", crtPath, cerr)
	case kerr != nil:
		return nil, nil, fmt.Errorf("CA key %s: %w", keyPath, kerr)
	}
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("CA in %s: ca.crt or ca.key is not PEM", dir)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate %s: %w", crtPath, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key %s: %w", keyPath, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("CA key %s: not an ECDSA key", keyPath)
	}
	return ca, key, nil
}

// makeCA makes a CA in dir (ca.key 0600).
func makeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "specstar NATS CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("CA directory %s: %w", dir, err)
	}
	if err := writePEMs(dir, map[string]*pem.Block{
		"ca.crt": {Type: "CERTIFICATE", Bytes: der},
		"ca.key": {Type: "PRIVATE KEY", Bytes: keyDER},
	}); err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}

// writePEMs writes each block to its file in dir, mode 0600.
func writePEMs(dir string, files map[string]*pem.Block) error {
	for name, b := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// serial is a random 127-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
