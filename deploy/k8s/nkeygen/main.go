// Command nkeygen makes the NATS user nkey of a region's deployment: it
// writes the seed to nkey.seed and the public key to specstar.pub in the
// directory given (default .), for the Secrets specstar-nats-client and
// specstar-nats-users (README, "Deploying on Kubernetes").
//
//	go run ./deploy/k8s/nkeygen DIR
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := generate(dir); err != nil {
		fmt.Fprintln(os.Stderr, "nkeygen:", err)
		os.Exit(1)
	}
}

// generate writes a new user's nkey.seed (mode 0600) and specstar.pub into
// dir.
func generate(dir string) error {
	user, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("create a user nkey: %w", err)
	}
	seed, err := user.Seed()
	if err != nil {
		return fmt.Errorf("user nkey seed: %w", err)
	}
	pub, err := user.PublicKey()
	if err != nil {
		return fmt.Errorf("user nkey public key: %w", err)
	}
	seedFile := filepath.Join(dir, "nkey.seed")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", seedFile, err)
	}
	pubFile := filepath.Join(dir, "specstar.pub")
	if err := os.WriteFile(pubFile, []byte(pub), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", pubFile, err)
	}
	return nil
}
