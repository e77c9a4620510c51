package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestGenerate: the seed is a user seed, private to its owner, and
// specstar.pub is its public key, which nats.conf's $SPECSTAR_NKEY takes.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	if err := generate(dir); err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(dir, "nkey.seed"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "nkey.seed")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("nkey.seed: mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		t.Fatalf("nkey.seed: %v", err)
	}
	want, _ := kp.PublicKey()
	pub, err := os.ReadFile(filepath.Join(dir, "specstar.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if string(pub) != want || !nkeys.IsValidPublicUserKey(string(pub)) {
		t.Errorf("specstar.pub %q, want the seed's user public key %q", pub, want)
	}
}
