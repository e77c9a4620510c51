package k8s_test

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/specstar/replicator/deploy/k8s/internal/natscerts"
)

// natsTLSDir is where the NATS pods mount the Secret nats-tls.
const natsTLSDir = "/etc/nats-tls"

// writeTestCerts writes the three keys of the Secret nats-tls (ca.crt,
// tls.crt, tls.key) into dir as the README has users make them (certgen,
// with a CA of its own beside dir), and returns dir.
func writeTestCerts(t *testing.T, dir string) string {
	t.Helper()
	if err := natscerts.Generate(dir+"-ca", dir, natscerts.DNSNames("specstar", []string{"nats-leaf.region-a.example.com"}), time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tlsBlock matches a tls { ... } block without nested blocks.
var tlsBlock = regexp.MustCompile(`(?s)tls\s*\{([^{}]*)\}`)

// checkSecured: the bus requires credentials and TLS everywhere. Clients
// connect over TLS as an nkey user; routes and leaf-node links are mutual
// TLS with the nats-tls certificate; every writer and replicator container
// is given its role's nkey seed and the CA by flag, from a mounted Secret; the
// NATS servers are ready by /healthz?js-server-only=true, spread across
// zones, and every Go container sets GOMEMLIMIT from its memory limit.
func checkSecured(t *testing.T, r rendered) {
	n := findNATS(t, r)
	main := n.conf[filepath.Base(n.main)]
	blocks := tlsBlock.FindAllStringSubmatch(main, -1)
	if len(blocks) < 2 {
		t.Fatalf("%s: %d tls blocks, want one for clients and one for routes", n.main, len(blocks))
	}
	for _, b := range blocks {
		for _, f := range []string{"cert_file", "key_file", "ca_file"} {
			if !regexp.MustCompile(`\b` + f + `:\s*` + natsTLSDir + `/`).MatchString(b[1]) {
				t.Errorf("%s: a tls block has no %s under %s:%s", n.main, f, natsTLSDir, b[1])
			}
		}
	}
	if cluster := regexp.MustCompile(`(?s)cluster\s*\{.*?tls\s*\{([^{}]*)\}`).FindStringSubmatch(main); cluster == nil || !strings.Contains(cluster[1], "verify: true") {
		t.Errorf("%s: routes are not mutual TLS (cluster tls with verify: true)", n.main)
	}
	// One nkey user per role, each with its permissions.
	auth := regexp.MustCompile(`(?s)authorization\s*\{\s*users:\s*\[(.*?)\]\s*\}`).FindStringSubmatch(main)
	if auth == nil {
		t.Fatalf("%s: no authorization block with users", n.main)
	}
	for _, role := range natsRoles {
		if !regexp.MustCompile(`\{\s*nkey:\s*\$SPECSTAR_` + strings.ToUpper(role) + `_NKEY,\s*permissions:\s*\$[A-Z_]+\s*\}`).MatchString(auth[1]) {
			t.Errorf("%s: no user for the role %s ({ nkey: $SPECSTAR_%s_NKEY, permissions: $... })", n.main, role, strings.ToUpper(role))
		}
	}
	if users := strings.Count(auth[1], "nkey:"); users != len(natsRoles) {
		t.Errorf("%s: %d users, want one per role %q", n.main, users, natsRoles)
	}
	leaf := n.conf["leafnodes.conf"]
	if !tlsBlock.MatchString(leaf) {
		t.Errorf("leafnodes.conf: the leaf-node link has no TLS:\n%s", leaf)
	}
	if strings.Contains(leaf, "listen:") && !strings.Contains(leaf, "verify: true") {
		t.Errorf("leafnodes.conf: the leaf-node port does not verify the remote's certificate (its credential)")
	}

	c := n.w.template.Spec.Containers[0]
	if !mountsSecret(n.w.template.Spec, c, natsTLSDir, "nats-tls") {
		t.Errorf("%s: %s is not the Secret nats-tls", n.w, natsTLSDir)
	}
	for _, role := range natsRoles {
		name := "SPECSTAR_" + strings.ToUpper(role) + "_NKEY"
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
				e.ValueFrom.SecretKeyRef.Name == "specstar-nats-users" && e.ValueFrom.SecretKeyRef.Key == role+".pub"
		}) {
			t.Errorf("%s: %s does not come from the Secret specstar-nats-users, key %s.pub", n.w, name, role)
		}
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz?js-server-only=true" {
		t.Errorf("%s: readiness probe %+v, want GET /healthz?js-server-only=true", n.w, p)
	}
	zoned := false
	for _, tsc := range n.w.template.Spec.TopologySpreadConstraints {
		if tsc.TopologyKey == "topology.kubernetes.io/zone" && tsc.MaxSkew == 1 && tsc.LabelSelector != nil &&
			selects(t, tsc.LabelSelector, n.w.template.Labels) {
			zoned = true
		}
	}
	if !zoned {
		t.Errorf("%s: the servers are not spread across zones (topologySpreadConstraints on topology.kubernetes.io/zone)", n.w)
	}

	for _, w := range workloads(r) {
		for _, c := range w.template.Spec.Containers {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
					e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
			}) {
				t.Errorf("%s container %s: no GOMEMLIMIT from its limits.memory", w, c.Name)
			}
			if c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s container %s: no memory limit for GOMEMLIMIT", w, c.Name)
			}
			if len(c.Command) == 0 || !slices.Contains(ours, c.Command[0]) {
				continue
			}
			for _, f := range []string{"nats-nkey", "tls-ca"} {
				v := flagValue(c.Args, f)
				if v == "" {
					t.Errorf("%s container %s: no --%s", w, c.Name, f)
					continue
				}
				if secret := "specstar-nats-" + clientRole(c); !mountsSecret(w.template.Spec, c, filepath.Dir(v), secret) {
					t.Errorf("%s container %s: --%s %s is not in the mounted Secret %s (its role's)", w, c.Name, f, v, secret)
				}
			}
		}
	}
}

// natsRoles are the NATS users of a region, one per role (nkeygen makes
// their keys).
var natsRoles = []string{"writer", "replicator", "stream", "leaf"}

// clientRole is the NATS role a writer or replicator container logs in
// as: the stream job alone may create or change streams.
func clientRole(c corev1.Container) string {
	switch {
	case c.Command[0] == "writer":
		return "writer"
	case len(c.Args) > 1 && c.Args[0] == "stream" && c.Args[1] == "apply":
		return "stream"
	}
	return "replicator"
}

// mountsSecret reports whether c mounts the Secret name, not optional, at
// dir.
func mountsSecret(spec corev1.PodSpec, c corev1.Container, dir, name string) bool {
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != dir {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == name && (v.Secret.Optional == nil || !*v.Secret.Optional) {
				return true
			}
		}
	}
	return false
}
