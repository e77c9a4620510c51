package natscerts

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGenerate: two regions made with one --ca share it; each server
// certificate verifies against it, as a server and as a client, for every
// name the clients, routes and region B's leaf node dial, and its key
// matches it and stays private.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	regionA, regionB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := Generate(caDir, regionA, DNSNames("specstar", []string{"nats-leaf.region-a.example.com"}), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := Generate(caDir, regionB, DNSNames("specstar", nil), time.Hour); err != nil {
		t.Fatal(err)
	}
	caA, _ := os.ReadFile(filepath.Join(regionA, "ca.crt"))
	caB, _ := os.ReadFile(filepath.Join(regionB, "ca.crt"))
	if len(caA) == 0 || !bytes.Equal(caA, caB) {
		t.Fatal("the two regions do not share one CA")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caA) {
		t.Fatal("ca.crt holds no certificate")
	}
	for _, tc := range []struct {
		region string
		names  []string
	}{
		{regionA, []string{"nats", "nats.specstar.svc", "nats-1.nats-headless", "nats-2.nats-headless.specstar.svc.cluster.local", "nats-leaf.region-a.example.com"}},
		{regionB, []string{"nats", "nats-0.nats-headless"}},
	} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(tc.region, "tls.crt"), filepath.Join(tc.region, "tls.key"))
		if err != nil {
			t.Fatalf("%s: tls.crt and tls.key: %v", tc.region, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range tc.names {
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Errorf("%s: %s (usage %v): %v", tc.region, name, usage, err)
				}
			}
		}
		if fi, err := os.Stat(filepath.Join(tc.region, "tls.key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: tls.key mode %v (%v), want 0600", tc.region, fi.Mode().Perm(), err)
		}
	}
	// Region B's certificate does not name region A's leaf address.
	pair, _ := tls.LoadX509KeyPair(filepath.Join(regionB, "tls.crt"), filepath.Join(regionB, "tls.key"))
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "nats-leaf.region-a.example.com"}); err == nil {
		t.Error("region B's certificate names region A's leaf-node host")
	}
	// A broken CA directory is an error naming the file, not a new CA.
	if err := os.WriteFile(filepath.Join(caDir, "ca.key"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Generate(caDir, filepath.Join(dir, "c"), DNSNames("specstar", nil), time.Hour); err == nil {
		t.Error("a CA directory with a junk ca.key was accepted")
	}
}
