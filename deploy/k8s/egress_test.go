package k8s_test

import (
	"fmt"
	"net/netip"
	neturl "net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// peer is where a connection goes: a pod (its namespace and labels; a pod
// of another namespace whose labels these manifests cannot know has
// empty ones) or an address outside the cluster.
type peer struct {
	what      string
	namespace string
	pod       map[string]string // nil: outside the cluster
	ip        netip.Addr
	port      int32
	protocol  corev1.Protocol
}

func (p peer) String() string {
	return fmt.Sprintf("%s (%s/%d)", p.what, p.protocol, p.port)
}

// Addresses outside the cluster for the checks: an S3 endpoint's, the
// instance metadata service's, and anyone's.
var (
	s3Address   = netip.MustParseAddr("52.92.0.10")
	imdsAddress = netip.MustParseAddr("169.254.169.254")
	farAddress  = netip.MustParseAddr("203.0.113.7")
)

// egressAllowed evaluates the rendered NetworkPolicies as a cluster does:
// a pod no Egress policy selects may go anywhere; otherwise it may open a
// connection that one rule of one of those policies allows. selected
// reports whether any policy selects the pod for Egress.
func egressAllowed(t *testing.T, nps []*networkingv1.NetworkPolicy, ns string, pod map[string]string, to peer) (allowed, selected bool) {
	t.Helper()
	for _, np := range nps {
		if !hasEgress(np) || (np.Namespace != "" && np.Namespace != ns) || !selects(t, &np.Spec.PodSelector, pod) {
			continue
		}
		selected = true
		for _, rule := range np.Spec.Egress {
			if portsAllow(t, np, rule.Ports, to) && peersAllow(t, ns, rule.To, to) {
				return true, true
			}
		}
	}
	return !selected, selected
}

func hasEgress(np *networkingv1.NetworkPolicy) bool {
	for _, pt := range np.Spec.PolicyTypes {
		if pt == networkingv1.PolicyTypeEgress {
			return true
		}
	}
	return len(np.Spec.PolicyTypes) == 0 && len(np.Spec.Egress) > 0
}

func portsAllow(t *testing.T, np *networkingv1.NetworkPolicy, ports []networkingv1.NetworkPolicyPort, to peer) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != to.protocol {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.IntVal == 0:
			// A named port means the destination pod's port of that name,
			// which a pod of another namespace may not have: say numbers.
			t.Errorf("NetworkPolicy %s: egress to port name %q; give the number", np.Name, p.Port.StrVal)
		case p.EndPort != nil:
			if to.port >= p.Port.IntVal && to.port <= *p.EndPort {
				return true
			}
		case p.Port.IntVal == to.port:
			return true
		}
	}
	return false
}

func peersAllow(t *testing.T, ns string, peers []networkingv1.NetworkPolicyPeer, to peer) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			if to.pod == nil && inBlock(t, p.IPBlock, to.ip) {
				return true
			}
			continue
		}
		if to.pod == nil {
			continue
		}
		if p.NamespaceSelector == nil {
			if to.namespace != ns {
				continue
			}
		} else if !selects(t, p.NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": to.namespace}) {
			continue
		}
		if p.PodSelector == nil || selects(t, p.PodSelector, to.pod) {
			return true
		}
	}
	return false
}

func inBlock(t *testing.T, b *networkingv1.IPBlock, ip netip.Addr) bool {
	t.Helper()
	in := func(cidr string) bool {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			t.Fatalf("ipBlock %q: %v", cidr, err)
		}
		return p.Contains(ip)
	}
	if !in(b.CIDR) {
		return false
	}
	for _, e := range b.Except {
		if in(e) {
			return false
		}
	}
	return true
}

// storePeers are the connections a store URL of specstar.yaml needs:
// Postgres or Redis at a Service NAME.NAMESPACE.svc, or S3 over HTTPS.
func storePeers(t *testing.T, raw string) []peer {
	t.Helper()
	raw = regexp.MustCompile(`\$\{[^}]*\}`).ReplaceAllString(raw, "x")
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatalf("store URL %q: %v", raw, err)
	}
	port := func(def int32) int32 {
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("store URL %q: port: %v", raw, err)
			}
			return int32(n)
		}
		return def
	}
	inCluster := func(def int32) peer {
		parts := strings.Split(u.Hostname(), ".")
		if len(parts) < 3 || parts[2] != "svc" {
			t.Fatalf("store URL %q: host %q is not a Service NAME.NAMESPACE.svc; the egress check knows no other", raw, u.Hostname())
		}
		return peer{what: u.Scheme + " " + u.Hostname(), namespace: parts[1], pod: map[string]string{}, port: port(def), protocol: corev1.ProtocolTCP}
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return []peer{inCluster(5432)}
	case "redis", "rediss":
		return []peer{inCluster(6379)}
	case "s3":
		return []peer{{what: "S3 " + u.Host, ip: s3Address, port: 443, protocol: corev1.ProtocolTCP}}
	case "disk", "":
		return nil
	}
	t.Fatalf("store URL %q: scheme %q unknown to the egress check", raw, u.Scheme)
	return nil
}

var leafRemote = regexp.MustCompile(`"[a-z-]+://[^":]+:(\d+)"`)

// checkEgress: every pod is held to egress policies, may open each
// connection its configuration needs (DNS; the NATS client port; each
// store of the deployments its --from and --to name; a NATS server its
// routes and leaf-node remotes) and none of the others a review names:
// stores it does not use, the NATS monitoring and route ports, the
// instance metadata service, any other address.
func checkEgress(t *testing.T, r rendered) {
	nps := objectsOf[networkingv1.NetworkPolicy](r)
	cfg := specstarConfig(t, r)
	n := findNATS(t, r)
	ns := ""
	for _, s := range objectsOf[appsv1.StatefulSet](r) {
		ns = s.Namespace
	}
	natsPod := func(port int32, what string) peer {
		return peer{what: what, namespace: ns, pod: n.w.template.Labels, port: port, protocol: corev1.ProtocolTCP}
	}
	dns := peer{what: "the cluster DNS", namespace: "kube-system", pod: map[string]string{"k8s-app": "kube-dns"}, port: 53, protocol: corev1.ProtocolUDP}
	key := func(p peer) string {
		return fmt.Sprintf("%s %s %v %s %d", p.namespace, p.ip, p.pod, p.protocol, p.port)
	}

	for _, w := range workloads(r) {
		need := []peer{dns}
		var stores []string
		for _, c := range w.template.Spec.Containers {
			switch {
			case len(c.Command) > 0 && c.Command[0] == "nats-server":
				need = append(need, natsPod(n.ports["cluster"], "another NATS server's routes"))
				for _, m := range leafRemote.FindAllStringSubmatch(n.conf["leafnodes.conf"], -1) {
					p, _ := strconv.Atoi(m[1])
					need = append(need, peer{what: "the other region's leaf-node port", ip: farAddress, port: int32(p), protocol: corev1.ProtocolTCP})
				}
			case len(c.Command) > 0 && (c.Command[0] == "replicator" || c.Command[0] == "writer"):
				need = append(need, natsPod(n.ports["client"], "the NATS client port"))
				for _, flag := range []string{"to", "from"} {
					name := flagValue(c.Args, flag)
					if name == "" {
						continue
					}
					d, ok := cfg.Deployments[name]
					if !ok {
						t.Fatalf("%s: --%s %s is not a deployment of specstar.yaml", w, flag, name)
					}
					for _, s := range []string{d.URL, d.Meta, d.Resources, d.Blobs} {
						if s != "" && !slices.Contains(stores, s) {
							stores = append(stores, s)
							need = append(need, storePeers(t, s)...)
						}
					}
				}
			}
		}
		needed := map[string]bool{}
		for _, p := range need {
			needed[key(p)] = true
			allowed, selected := egressAllowed(t, nps, ns, w.template.Labels, p)
			if !selected {
				t.Errorf("%s: no NetworkPolicy limits its egress", w)
				break
			}
			if !allowed {
				t.Errorf("%s: egress to %s is refused; its configuration needs it (stores %q)", w, p, stores)
			}
		}
		for _, p := range []peer{
			{what: "a Postgres in namespace db", namespace: "db", pod: map[string]string{}, port: 5432, protocol: corev1.ProtocolTCP},
			{what: "S3 over HTTPS", ip: s3Address, port: 443, protocol: corev1.ProtocolTCP},
			natsPod(n.ports["monitor"], "the NATS monitoring port"),
			natsPod(n.ports["cluster"], "the NATS route port"),
			natsPod(n.ports["client"], "the NATS client port"),
			{what: "the instance metadata service", ip: imdsAddress, port: 80, protocol: corev1.ProtocolTCP},
			{what: "the instance metadata service over HTTPS", ip: imdsAddress, port: 443, protocol: corev1.ProtocolTCP},
			{what: "ssh anywhere", ip: farAddress, port: 22, protocol: corev1.ProtocolTCP},
			{what: "a pod of another namespace", namespace: "default", pod: map[string]string{"app": "other"}, port: 8080, protocol: corev1.ProtocolTCP},
		} {
			if needed[key(p)] {
				continue
			}
			if allowed, _ := egressAllowed(t, nps, ns, w.template.Labels, p); allowed {
				t.Errorf("%s: egress to %s is allowed; nothing in its configuration needs it (stores %q)", w, p, stores)
			}
		}
	}
}
