package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestGenerate: each role's seed is a user seed, private to its owner,
// and ROLE.pub is its public key, which nats.conf's $SPECSTAR_ROLE_NKEY
// takes; no two roles share a key.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	seen := map[string]string{}
	for _, role := range roles {
		if err := generate(dir, role); err != nil {
			t.Fatal(err)
		}
		seedFile := filepath.Join(dir, role+".seed")
		seed, err := os.ReadFile(seedFile)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(seedFile); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", seedFile, fi.Mode().Perm(), err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			t.Fatalf("%s: %v", seedFile, err)
		}
		want, _ := kp.PublicKey()
		pub, err := os.ReadFile(filepath.Join(dir, role+".pub"))
		if err != nil {
			t.Fatal(err)
		}
		if string(pub) != want || !nkeys.IsValidPublicUserKey(string(pub)) {
			t.Errorf("%s.pub %q, want the seed's user public key %q", role, pub, want)
		}
		if other, ok := seen[want]; ok {
			t.Errorf("roles %s and %s share the key %s", other, role, want)
		}
		seen[want] = role
	}
}
