package k8s_test

import (
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/specstar/replicator/internal/deployment"
)

// The origin region and its mirror, as overlays.
const (
	originRegion = "region-a"
	mirrorRegion = "region-b"
)

// objectKeys names every object of r as "Kind name".
func objectKeys(r rendered) []string {
	var keys []string
	for _, o := range r.objects {
		if x, ok := o.(interface{ GetName() string }); ok {
			keys = append(keys, reflect.TypeOf(o).Elem().Name()+" "+x.GetName())
		}
	}
	slices.Sort(keys)
	return keys
}

// replicators are the workloads that run `replicator run`.
func replicators(r rendered) map[string]workload {
	out := map[string]workload{}
	for _, w := range workloads(r) {
		for _, c := range w.template.Spec.Containers {
			if len(c.Command) > 0 && c.Command[0] == "replicator" && len(c.Args) > 0 && c.Args[0] == "run" {
				out[w.name] = w
			}
		}
	}
	return out
}

// writers are the workloads that run `writer`.
func writers(r rendered) []workload {
	var out []workload
	for _, w := range workloads(r) {
		for _, c := range w.template.Spec.Containers {
			if len(c.Command) > 0 && c.Command[0] == "writer" {
				out = append(out, w)
			}
		}
	}
	return out
}

// TestRegionBMirrorsRegionA: region B runs what region A runs (the NATS
// cluster, the stream job, the same replicator workloads with the same
// command lines and sinks of the same kinds) except the publisher, and
// its stream is a mirror of A's: mirror-of names A's stream, mirror-domain
// A's JetStream domain, and B's leaf-node remote reaches the port A's
// servers listen on for it, through a Service and a NetworkPolicy of A.
func TestRegionBMirrorsRegionA(t *testing.T) {
	kustomize := kustomizer(t)
	a := renderOverlay(t, kustomize, originRegion)
	b := renderOverlay(t, kustomize, mirrorRegion)

	// Everything B has, A has, but the egress of B's leaf-node dial; what
	// A has beyond it serves the publisher or B's leaf-node link.
	ka, kb := objectKeys(a), objectKeys(b)
	for _, k := range kb {
		if !slices.Contains(ka, k) && !strings.HasPrefix(k, "ConfigMap ") && // generated names carry a hash
			k != "NetworkPolicy nats-egress-leafnodes" {
			t.Errorf("%s has %s, %s does not", mirrorRegion, k, originRegion)
		}
	}
	for _, k := range ka {
		if !slices.Contains(kb, k) && !strings.HasPrefix(k, "ConfigMap ") &&
			!slices.Contains([]string{"Deployment specstar-writer-tail", "NetworkPolicy specstar-writer-tail-egress", "Service nats-leaf", "NetworkPolicy nats-leafnodes"}, k) {
			t.Errorf("%s has %s, which %s lacks", originRegion, k, mirrorRegion)
		}
	}

	ra, rb := replicators(a), replicators(b)
	if len(ra) < 3 || len(ra) != len(rb) {
		t.Fatalf("replicator workloads: %s %d, %s %d; want the same, one per sink (disk, Postgres, S3)", originRegion, len(ra), mirrorRegion, len(rb))
	}
	cfgA, cfgB := specstarConfig(t, a), specstarConfig(t, b)
	for name, wa := range ra {
		wb, ok := rb[name]
		if !ok {
			t.Errorf("%s: %s runs %s, %s does not", name, originRegion, name, mirrorRegion)
			continue
		}
		if wa.replicas != wb.replicas {
			t.Errorf("%s: %d replicas in %s, %d in %s", name, wa.replicas, originRegion, wb.replicas, mirrorRegion)
		}
		ca, cb := wa.template.Spec.Containers[0], wb.template.Spec.Containers[0]
		if !slices.Equal(ca.Args, cb.Args) || !slices.Equal(ca.Command, cb.Command) {
			t.Errorf("%s: %q %q in %s, %q %q in %s", name, ca.Command, ca.Args, originRegion, cb.Command, cb.Args, mirrorRegion)
		}
		sinkName := flagValue(ca.Args, "to")
		da, _, errA := cfgA.Lookup(sinkName)
		db, _, errB := cfgB.Lookup(sinkName)
		if errA == nil && errB == nil && !sameKinds(da, db) {
			t.Errorf("%s: sink %s is %s in %s, %s in %s", name, sinkName, da, originRegion, db, mirrorRegion)
		}
	}

	// The publisher runs in A only, as exactly one instance.
	if w := writers(b); len(w) != 0 {
		t.Errorf("%s runs %v: a mirror's stream takes no publishes", mirrorRegion, w)
	}
	checkSingleTail(t, a)

	// B's stream mirrors A's.
	stream := cfgA.NATS["stream"]
	if stream == "" {
		stream = "SPECSTAR"
	}
	if cfgA.NATS["mirror-of"] != "" {
		t.Errorf("%s: nats.mirror-of %q; the origin's stream is no mirror", originRegion, cfgA.NATS["mirror-of"])
	}
	if cfgB.NATS["mirror-of"] != stream {
		t.Errorf("%s: nats.mirror-of %q, want %s's stream %s", mirrorRegion, cfgB.NATS["mirror-of"], originRegion, stream)
	}
	na, nb := findNATS(t, a), findNATS(t, b)
	domainA, domainB := na.setting(t, "domain.conf", "domain"), nb.setting(t, "domain.conf", "domain")
	if domainA == domainB {
		t.Errorf("both regions are JetStream domain %s; a leaf-node mirror needs two", domainA)
	}
	if cfgB.NATS["mirror-domain"] != domainA {
		t.Errorf("%s: nats.mirror-domain %q, want %s's JetStream domain %s", mirrorRegion, cfgB.NATS["mirror-domain"], originRegion, domainA)
	}
	if ca, cb := na.setting(t, "cluster.conf", "name"), nb.setting(t, "cluster.conf", "name"); ca == cb {
		t.Errorf("both regions' clusters are named %s; a leaf node refuses a hub of its own cluster's name", ca)
	}

	// B's leaf-node remote reaches A's leaf-node listener.
	listen := regexp.MustCompile(`listen:\s*\S*:(\d+)`).FindStringSubmatch(na.conf["leafnodes.conf"])
	remote := regexp.MustCompile(`"(nats-leaf://[^"]+)"`).FindStringSubmatch(nb.conf["leafnodes.conf"])
	if listen == nil || remote == nil {
		t.Fatalf("leafnodes.conf: %s listens on %v, %s connects to %v; want a listener in A and a remote in B", originRegion, listen, mirrorRegion, remote)
	}
	u, err := url.Parse(remote[1])
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() != listen[1] {
		t.Errorf("%s's leaf-node remote %s, but %s listens on %s", mirrorRegion, remote[1], originRegion, listen[1])
	}
	exposed := false
	for _, s := range objectsOf[corev1.Service](a) {
		for _, p := range s.Spec.Ports {
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer && p.Port == portOf(":"+u.Port()) && selects(t, metav1Selector(s.Spec.Selector), na.w.template.Labels) &&
				probePort(na.w.template.Spec.Containers[0], p.TargetPort) == portOf(":"+listen[1]) {
				exposed = true
			}
		}
	}
	if !exposed {
		t.Errorf("%s: no LoadBalancer Service takes port %s to the NATS servers' leaf-node port", originRegion, u.Port())
	}
	allowed := false
	for _, np := range objectsOf[networkingv1.NetworkPolicy](a) {
		if !selects(t, &np.Spec.PodSelector, na.w.template.Labels) {
			continue
		}
		for _, in := range np.Spec.Ingress {
			for _, p := range in.Ports {
				if p.Port != nil && (*p.Port == intstr.FromInt32(portOf(":"+listen[1])) || *p.Port == intstr.FromString("leafnodes")) {
					allowed = true
				}
			}
		}
	}
	if !allowed {
		t.Errorf("%s: no NetworkPolicy lets the leaf-node port %s in", originRegion, listen[1])
	}
}

// sameKinds reports whether two deployments keep each layer in the same
// kind of store.
func sameKinds(a, b deployment.Deployment) bool {
	for _, l := range []deployment.Layer{deployment.MetaLayer, deployment.ResourcesLayer, deployment.BlobsLayer} {
		if (a.Layer(l) == "") != (b.Layer(l) == "") || deployment.Scheme(a.Layer(l)) != deployment.Scheme(b.Layer(l)) {
			return false
		}
	}
	return true
}

// checkSingleTail: the origin runs writer tail as exactly one instance, a
// Deployment of one replica whose rollouts stop the old pod first.
func checkSingleTail(t *testing.T, r rendered) {
	ws := writers(r)
	if len(ws) != 1 {
		t.Fatalf("%s: writer workloads %v, want one writer tail", r.name, ws)
	}
	w := ws[0]
	if w.replicas != 1 {
		t.Errorf("%s: %d replicas of writer tail, want exactly one", w, w.replicas)
	}
	for _, d := range objectsOf[appsv1.Deployment](r) {
		if d.Name == w.name && d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("%s: strategy %q: a RollingUpdate runs the new tail beside the old one; want Recreate", w, d.Spec.Strategy.Type)
		}
	}
	if w.kind != "Deployment" {
		t.Errorf("%s: want a Deployment of one replica", w)
	}
	if c := w.template.Spec.Containers[0]; len(c.Args) == 0 || c.Args[0] != "tail" {
		t.Errorf("%s: runs writer %q, want writer tail", w, c.Args)
	}
}
