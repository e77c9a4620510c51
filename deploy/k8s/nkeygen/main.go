// Command nkeygen makes the NATS user nkeys of a region's deployment, one
// per role (writer, replicator, stream, leaf): it writes each seed to
// ROLE.seed (mode 0600) and its public key to ROLE.pub in the directory
// given (default .), for the Secrets specstar-nats-users (the public
// keys) and specstar-nats-ROLE (a seed each; README, "Deploying on
// Kubernetes"). Both regions share the leaf key pair: A holds leaf.pub,
// B leaf.seed.
//
//	go run ./deploy/k8s/nkeygen DIR
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

// roles are the NATS users of a deployment, each with the permissions
// nats.conf gives it.
var roles = []string{"writer", "replicator", "stream", "leaf"}

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	for _, role := range roles {
		if err := generate(dir, role); err != nil {
			fmt.Fprintln(os.Stderr, "nkeygen:", err)
			os.Exit(1)
		}
	}
}

// generate writes a new user's ROLE.seed (mode 0600) and ROLE.pub into
// dir.
func generate(dir, role string) error {
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
	seedFile := filepath.Join(dir, role+".seed")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", seedFile, err)
	}
	pubFile := filepath.Join(dir, role+".pub")
	if err := os.WriteFile(pubFile, []byte(pub), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", pubFile, err)
	}
	return nil
}
