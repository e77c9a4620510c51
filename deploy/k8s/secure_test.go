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
// is given the nkey seed and the CA by flag, from a mounted Secret; the
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
	if !regexp.MustCompile(`(?s)authorization\s*\{\s*users:\s*\[\s*\{\s*nkey:\s*\$SPECSTAR_NKEY`).MatchString(main) {
		t.Errorf("%s: clients are not required to authenticate with the nkey $SPECSTAR_NKEY", n.main)
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
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "SPECSTAR_NKEY" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
	}) {
		t.Errorf("%s: SPECSTAR_NKEY does not come from a Secret", n.w)
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
				if !mountsSecret(w.template.Spec, c, filepath.Dir(v), "specstar-nats-client") {
					t.Errorf("%s container %s: --%s %s is not in the mounted Secret specstar-nats-client", w, c.Name, f, v)
				}
			}
		}
	}
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
