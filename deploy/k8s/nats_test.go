package k8s_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nats-io/nkeys"

	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/testsupport/natscluster"
)

// natsCluster is the NATS StatefulSet of a rendered overlay, with its
// configuration files as its pods see them.
type natsCluster struct {
	w     workload
	conf  map[string]string // file name in the config directory -> content
	dir   string            // where the config is mounted
	main  string            // the file --config names
	ports map[string]int32  // container ports by name
}

func findNATS(t *testing.T, r rendered) natsCluster {
	t.Helper()
	for _, w := range workloads(r) {
		for _, c := range w.template.Spec.Containers {
			if len(c.Command) == 0 || c.Command[0] != "nats-server" {
				continue
			}
			if w.kind != "StatefulSet" {
				t.Fatalf("%s runs nats-server; want a StatefulSet (stable names and per-pod volumes)", w)
			}
			main := flagValue(c.Command[1:], "config")
			n := natsCluster{w: w, main: main, dir: filepath.Dir(main), conf: map[string]string{}, ports: map[string]int32{}}
			for _, p := range c.Ports {
				n.ports[p.Name] = p.ContainerPort
			}
			for _, m := range c.VolumeMounts {
				if filepath.Clean(m.MountPath) != n.dir {
					continue
				}
				for _, v := range w.template.Spec.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil {
						if cm := configMap(r, v.ConfigMap.Name); cm != nil {
							n.conf = cm.Data
						}
					}
				}
			}
			if n.conf[filepath.Base(main)] == "" {
				t.Fatalf("%s: --config %s is not a file of a ConfigMap it mounts", w, main)
			}
			return n
		}
	}
	t.Fatal("no nats-server container")
	return natsCluster{}
}

// setting is the first value of `key: value` in the configuration files.
func (n natsCluster) setting(t *testing.T, block, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + key + `:\s*(\S+)`).FindStringSubmatch(n.conf[block])
	if m == nil {
		t.Fatalf("nats configuration %s has no %s", block, key)
	}
	return strings.Trim(m[1], `"`)
}

// specstarConfig is the specstar.yaml every replicator and writer
// container of r mounts (they must all mount the same one).
func specstarConfig(t *testing.T, r rendered) *deployment.Config {
	t.Helper()
	var raw string
	for _, w := range workloads(r) {
		for _, c := range w.template.Spec.Containers {
			if len(c.Command) == 0 || !slices.Contains(ours, c.Command[0]) {
				continue
			}
			got, ok := mountedFile(r, w.template.Spec, c, flagValue(c.Args, "config"))
			if !ok {
				t.Fatalf("%s container %s: its --config is not mounted", w, c.Name)
			}
			if raw != "" && got != raw {
				t.Fatalf("%s container %s: another configuration than the other containers'", w, c.Name)
			}
			raw = got
		}
	}
	cfg, err := deployment.Parse("specstar.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var route = regexp.MustCompile(`nats://([a-z0-9-]+)\.([a-z0-9-]+):(\d+)`)

// checkNATS: three servers with a volume each, found by each other
// through the headless Service the routes name, a configuration the real
// nats-server accepts, and a stream created with three replicas at the
// address the replicators use.
func checkNATS(t *testing.T, r rendered) {
	n := findNATS(t, r)
	if n.w.replicas != 3 {
		t.Errorf("%s: %d replicas, want 3", n.w, n.w.replicas)
	}
	if len(n.w.claims) == 0 {
		t.Errorf("%s: no volumeClaimTemplates: the servers would share or lose their JetStream files", n.w)
	}
	// An acknowledged event must be on disk: the writers confirm source
	// positions on JetStream's acknowledgement.
	if js := regexp.MustCompile(`(?s)jetstream\s*\{[^}]*\}`).FindString(n.conf[filepath.Base(n.main)]); !regexp.MustCompile(`(?m)^\s*sync_interval:\s*"?always"?\s*$`).MatchString(js) {
		t.Errorf("%s: the jetstream block does not set sync_interval: always, so a power cut loses acknowledged events:\n%s", n.main, js)
	}
	var sts string
	for _, s := range objectsOf[appsv1.StatefulSet](r) {
		if s.Name == n.w.name {
			sts = s.Spec.ServiceName
		}
	}
	var headless *corev1.Service
	for _, s := range objectsOf[corev1.Service](r) {
		if s.Name == sts {
			headless = s
		}
	}
	switch {
	case headless == nil:
		t.Fatalf("%s: serviceName %q is not a Service", n.w, sts)
	case headless.Spec.ClusterIP != corev1.ClusterIPNone:
		t.Errorf("Service %s: clusterIP %q, want None (headless: one DNS name per pod)", sts, headless.Spec.ClusterIP)
	case !headless.Spec.PublishNotReadyAddresses:
		t.Errorf("Service %s: not-ready pods are not published, so the servers cannot find each other before they are ready", sts)
	}
	if headless != nil && !selects(t, metav1Selector(headless.Spec.Selector), n.w.template.Labels) {
		t.Errorf("Service %s does not select %s's pods", sts, n.w)
	}

	var routes []string
	for _, m := range route.FindAllStringSubmatch(n.conf[filepath.Base(n.main)], -1) {
		if m[2] != sts || m[3] != strconv.Itoa(int(n.ports["cluster"])) {
			t.Errorf("route %s: want <pod>.%s:%d", m[0], sts, n.ports["cluster"])
		}
		routes = append(routes, m[1])
	}
	want := []string{n.w.name + "-0", n.w.name + "-1", n.w.name + "-2"}
	if slices.Sort(routes); !slices.Equal(routes, want) {
		t.Errorf("routes name %q, want all of %q", routes, want)
	}

	// The real nats-server accepts the configuration, includes and all:
	// the go.mod's version, the one the image runs (Debian's 2.9.10 knows
	// no sync_interval).
	server, err := natscluster.Binary()
	if err != nil {
		t.Fatalf("nats-server checks the cluster's configuration: %v", err)
	}
	// The certificates and the user's public nkey are the Secrets' part: a
	// CA and a server certificate made here, at the path the pod mounts.
	dir := t.TempDir()
	tlsDir := writeTestCerts(t, filepath.Join(dir, "tls"))
	for name, data := range n.conf {
		data = strings.ReplaceAll(data, natsTLSDir+"/", tlsDir+"/")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(server, "-t", "-c", filepath.Join(dir, filepath.Base(n.main)))
	cmd.Env = append([]string{"POD_NAME=" + want[0]}, roleEnv(t)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("nats-server -t rejects the configuration: %v\n%s", err, out)
	}

	// The stream: replicated on all three servers, at the address the
	// replicators and the writer dial.
	cfg := specstarConfig(t, r)
	if cfg.NATS["replicas"] != strconv.Itoa(int(n.w.replicas)) {
		t.Errorf("specstar.yaml: nats.replicas %q, want %d (one per server)", cfg.NATS["replicas"], n.w.replicas)
	}
	u, err := url.Parse(cfg.NATS["url"])
	if err != nil {
		t.Fatalf("specstar.yaml: nats.url: %v", err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	served := false
	for _, s := range objectsOf[corev1.Service](r) {
		for _, p := range s.Spec.Ports {
			if s.Name == host && strconv.Itoa(int(p.Port)) == port && p.TargetPort.String() == "client" &&
				selects(t, metav1Selector(s.Spec.Selector), n.w.template.Labels) {
				served = true
			}
		}
	}
	if !served {
		t.Errorf("specstar.yaml: nats.url %s is not a Service port of the NATS servers' client port", cfg.NATS["url"])
	}
	jobs := 0
	for _, w := range workloads(r) {
		for _, c := range w.template.Spec.Containers {
			if len(c.Command) > 0 && c.Command[0] == "replicator" && len(c.Args) > 1 && c.Args[0] == "stream" && c.Args[1] == "apply" {
				jobs++
				if v := flagValue(c.Args, "replicas"); v != "" && v != fmt.Sprint(n.w.replicas) {
					t.Errorf("%s: stream apply --replicas %s, want %d", w, v, n.w.replicas)
				}
			}
		}
	}
	if jobs != 1 {
		t.Errorf("%d workloads run replicator stream apply, want one Job that creates the stream", jobs)
	}
}

// roleEnv is the environment the NATS pods get from the Secrets
// specstar-nats-users (every role's public key) and, in region B,
// specstar-nats-leaf (the leaf link's seed): keys made here.
func roleEnv(t *testing.T) []string {
	t.Helper()
	var env []string
	for _, role := range natsRoles {
		user, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, err := user.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, "SPECSTAR_"+strings.ToUpper(role)+"_NKEY="+pub)
		if role == "leaf" {
			seed, err := user.Seed()
			if err != nil {
				t.Fatal(err)
			}
			env = append(env, "SPECSTAR_LEAF_SEED="+string(seed))
		}
	}
	return env
}

func metav1Selector(m map[string]string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: m}
}
