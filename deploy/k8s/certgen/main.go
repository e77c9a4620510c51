// Command certgen makes the TLS files of a region's NATS servers: a CA
// (ca.crt, ca.key in --ca, made there once and reused, so that both
// regions share it) and a server certificate it signs (tls.crt, tls.key,
// with ca.crt beside them in the output directory), for the Secret
// nats-tls (README, "Deploying on Kubernetes"). The certificate names
// what the clients and routes dial in --namespace, and every --leaf host
// (region A's leaf-node address, which region B verifies); it has both
// server and client usages, since each server presents it to its peers.
//
//	go run ./deploy/k8s/certgen [--ca DIR] [--namespace NS] [--leaf HOST]... [--days N] OUT
//
// Teams with cert-manager use a Certificate with the same names instead.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/specstar/replicator/deploy/k8s/internal/natscerts"
)

// leaves collects the repeatable --leaf flag.
type leaves []string

func (l *leaves) String() string     { return strings.Join(*l, ",") }
func (l *leaves) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	fs := flag.NewFlagSet("certgen", flag.ExitOnError)
	caDir := fs.String("ca", "nats-ca", "directory of the CA (ca.crt, ca.key): made if it holds none, reused otherwise")
	ns := fs.String("namespace", "specstar", "namespace the NATS Services run in")
	days := fs.Int("days", 365, "days the server certificate is valid")
	var leaf leaves
	fs.Var(&leaf, "leaf", "a leaf-node host name the certificate also names (repeatable; region A's)")
	_ = fs.Parse(os.Args[1:])
	out := "nats-tls"
	if fs.NArg() > 0 {
		out = fs.Arg(0)
	}
	if err := natscerts.Generate(*caDir, out, natscerts.DNSNames(*ns, leaf), time.Duration(*days)*24*time.Hour); err != nil {
		fmt.Fprintln(os.Stderr, "certgen:", err)
		os.Exit(1)
	}
}
