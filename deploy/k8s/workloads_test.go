package k8s_test

import (
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/specstar/replicator/internal/cli"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/sink"
)

// ours are the commands the image holds.
var ours = []string{"replicator", "writer"}

// workload is anything that runs pods: a Deployment, a StatefulSet or a
// Job.
type workload struct {
	kind, name  string
	replicas    int32
	longRunning bool
	template    corev1.PodTemplateSpec
	claims      []corev1.PersistentVolumeClaim // a StatefulSet's volumeClaimTemplates
}

func (w workload) String() string { return w.kind + " " + w.name }

func objectsOf[T any](r rendered) []*T {
	var out []*T
	for _, o := range r.objects {
		if x, ok := o.(*T); ok {
			out = append(out, x)
		}
	}
	return out
}

func workloads(r rendered) []workload {
	var out []workload
	for _, d := range objectsOf[appsv1.Deployment](r) {
		n := int32(1)
		if d.Spec.Replicas != nil {
			n = *d.Spec.Replicas
		}
		out = append(out, workload{kind: "Deployment", name: d.Name, replicas: n, longRunning: true, template: d.Spec.Template})
	}
	for _, s := range objectsOf[appsv1.StatefulSet](r) {
		n := int32(1)
		if s.Spec.Replicas != nil {
			n = *s.Spec.Replicas
		}
		out = append(out, workload{kind: "StatefulSet", name: s.Name, replicas: n, longRunning: true, template: s.Spec.Template, claims: s.Spec.VolumeClaimTemplates})
	}
	for _, j := range objectsOf[batchv1.Job](r) {
		out = append(out, workload{kind: "Job", name: j.Name, replicas: 1, template: j.Spec.Template})
	}
	return out
}

// selects reports whether sel matches the pod labels.
func selects(t *testing.T, sel *metav1.LabelSelector, pod map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return s.Matches(labels.Set(pod))
}

func configMap(r rendered, name string) *corev1.ConfigMap {
	for _, c := range objectsOf[corev1.ConfigMap](r) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// mountedFile is the content of the file path as the container sees it,
// when it lies in a ConfigMap volume; ok is false otherwise.
func mountedFile(r rendered, spec corev1.PodSpec, c corev1.Container, file string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if path.Dir(file) != path.Clean(m.MountPath) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				if cm := configMap(r, v.ConfigMap.Name); cm != nil {
					data, ok := cm.Data[path.Base(file)]
					return data, ok
				}
			}
		}
	}
	return "", false
}

// TestOverlays renders every overlay with kustomize, decodes every
// document strictly into the Kubernetes API types, and holds each to what
// a cluster and an operator need: pods that run as non-root on a
// read-only root filesystem with requests and probes, the image the
// Dockerfile builds, command lines the real binaries accept naming
// deployments the mounted configuration holds, secrets referenced and
// never written, disruption budgets and network policies that select
// pods, and a 3-node NATS JetStream cluster whose configuration the real
// nats-server accepts.
func TestOverlays(t *testing.T) {
	kustomize := kustomizer(t)
	bins := buildImageBinaries(t)
	image := readmeImage(t)
	for _, name := range overlays(t) {
		r := renderOverlay(t, kustomize, name)
		t.Run(name, func(t *testing.T) {
			t.Run("pods", func(t *testing.T) { checkPods(t, r, image) })
			t.Run("command lines", func(t *testing.T) { checkCommandLines(t, r, bins) })
			t.Run("secrets", func(t *testing.T) { checkSecrets(t, r) })
			t.Run("disruption budgets", func(t *testing.T) { checkPDBs(t, r) })
			t.Run("network policies", func(t *testing.T) { checkNetworkPolicies(t, r) })
			t.Run("egress", func(t *testing.T) { checkEgress(t, r) })
			t.Run("nats", func(t *testing.T) { checkNATS(t, r) })
			t.Run("secured", func(t *testing.T) { checkSecured(t, r) })
		})
	}
}

// natsModuleVersion is the nats-server version go.mod requires: the server
// the tests embed, which the cluster's image should run.
func natsModuleVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*github.com/nats-io/nats-server/v2 v(\S+)`).FindStringSubmatch(mustRead(t, filepath.Join(repoRoot, "go.mod")))
	if m == nil {
		t.Fatal("go.mod requires no nats-server")
	}
	return m[1]
}

func checkPods(t *testing.T, r rendered, image string) {
	natsVersion := natsModuleVersion(t)
	ws := workloads(r)
	if len(ws) == 0 {
		t.Fatal("no workloads")
	}
	for _, w := range ws {
		spec := w.template.Spec
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("%s: the pod does not set runAsNonRoot: true", w)
		}
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: the pod's seccompProfile is not RuntimeDefault", w)
		}
		if sa := spec.ServiceAccountName; sa != "" && !slices.ContainsFunc(objectsOf[corev1.ServiceAccount](r), func(s *corev1.ServiceAccount) bool { return s.Name == sa }) {
			t.Errorf("%s: serviceAccountName %s does not exist", w, sa)
		}
		volumes := map[string]corev1.Volume{}
		for _, v := range spec.Volumes {
			volumes[v.Name] = v
			switch {
			case v.ConfigMap != nil && configMap(r, v.ConfigMap.Name) == nil:
				t.Errorf("%s: volume %s: ConfigMap %s does not exist", w, v.Name, v.ConfigMap.Name)
			case v.PersistentVolumeClaim != nil && !slices.ContainsFunc(objectsOf[corev1.PersistentVolumeClaim](r), func(p *corev1.PersistentVolumeClaim) bool {
				return p.Name == v.PersistentVolumeClaim.ClaimName
			}):
				t.Errorf("%s: volume %s: PersistentVolumeClaim %s does not exist", w, v.Name, v.PersistentVolumeClaim.ClaimName)
			}
		}
		for _, c := range w.claims {
			volumes[c.Name] = corev1.Volume{Name: c.Name}
		}
		for _, c := range spec.Containers {
			where := fmt.Sprintf("%s container %s", w, c.Name)
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s: no securityContext", where)
			default:
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: the root filesystem is not read-only", where)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s: allowPrivilegeEscalation is not false", where)
				}
				if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
					t.Errorf("%s: capabilities are not all dropped", where)
				}
			}
			uid := psc.RunAsUser
			if sc != nil && sc.RunAsUser != nil {
				uid = sc.RunAsUser
			}
			if uid == nil || *uid == 0 {
				t.Errorf("%s: runs as uid %v, want a numeric non-root uid", where, uid)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: requests %v, want cpu and memory", where, c.Resources.Requests)
			}
			if c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: no memory limit", where)
			}
			for _, m := range c.VolumeMounts {
				if _, ok := volumes[m.Name]; !ok {
					t.Errorf("%s: mounts %s, which the pod does not have", where, m.Name)
				}
			}
			isOurs := len(c.Command) > 0 && slices.Contains(ours, c.Command[0])
			switch {
			case isOurs && c.Image != image:
				t.Errorf("%s: image %s, want %s (what the README's docker build tags)", where, c.Image, image)
			case !isOurs && strings.HasPrefix(c.Image, strings.Split(image, ":")[0]):
				t.Errorf("%s: runs %s but not as replicator or writer (command %q)", where, c.Image, c.Command)
			case len(c.Command) > 0 && c.Command[0] == "nats-server" && !strings.Contains(c.Image, ":"+natsVersion):
				t.Errorf("%s: image %s, want nats-server %s (go.mod's, the server the tests run)", where, c.Image, natsVersion)
			}
			if !w.longRunning {
				continue
			}
			for probeName, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil {
					t.Errorf("%s: no HTTP %s probe", where, probeName)
					continue
				}
				port := probePort(c, p.HTTPGet.Port)
				if port == 0 {
					t.Errorf("%s: %s probe port %s is not a port of the container", where, probeName, p.HTTPGet.Port.String())
				}
				if !isOurs {
					if !strings.HasPrefix(p.HTTPGet.Path, "/healthz") {
						t.Errorf("%s: %s probe on %s, want /healthz", where, probeName, p.HTTPGet.Path)
					}
					continue
				}
				want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[probeName]
				if p.HTTPGet.Path != want {
					t.Errorf("%s: %s probe on %s, want %s", where, probeName, p.HTTPGet.Path, want)
				}
				if listen := flagValue(c.Args, "listen"); portOf(listen) != port {
					t.Errorf("%s: %s probe on port %d, but the command listens on %q", where, probeName, port, listen)
				}
			}
		}
	}
}

// probePort resolves a probe's port (a number or a container port's name).
func probePort(c corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort
		}
	}
	return 0
}

// checkCommandLines runs every replicator and writer command line of the
// manifests through the binaries the Dockerfile builds, in their
// parse-only mode: the real flag parsing accepts it, and nothing runs.
// The deployments it names must be in the configuration it mounts, with
// the secrets their ${VAR}s need in the container's environment.
func checkCommandLines(t *testing.T, r rendered, bins string) {
	seen := 0
	for _, w := range workloads(r) {
		for _, c := range w.template.Spec.Containers {
			if len(c.Command) == 0 || !slices.Contains(ours, c.Command[0]) {
				continue
			}
			seen++
			where := fmt.Sprintf("%s container %s", w, c.Name)
			argv := slices.Concat(c.Command[1:], c.Args)
			cmd := exec.Command(filepath.Join(bins, c.Command[0]), argv...)
			cmd.Env = []string{cli.ParseOnlyEnv + "=1", "PATH=/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), c.Command[0]+" ") || !strings.HasSuffix(string(out), ": command line accepted\n") {
				t.Errorf("%s: %s %q is not accepted (%v):\n%s", where, c.Command[0], argv, err, out)
			}
			checkNamedDeployments(t, r, w, c, where)
		}
	}
	if seen == 0 {
		t.Fatal("no replicator or writer container")
	}
}

func checkNamedDeployments(t *testing.T, r rendered, w workload, c corev1.Container, where string) {
	cfgPath := flagValue(c.Args, "config")
	if cfgPath == "" {
		t.Errorf("%s: no --config", where)
		return
	}
	raw, ok := mountedFile(r, w.template.Spec, c, cfgPath)
	if !ok {
		t.Errorf("%s: --config %s is not a file of a ConfigMap the container mounts", where, cfgPath)
		return
	}
	cfg, err := deployment.Parse(cfgPath, []byte(raw))
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	// The container's environment, and nothing else, fills the file's
	// ${VAR}s: a secret's value stands in for itself.
	for _, m := range envRef.FindAllStringSubmatch(raw, -1) {
		t.Setenv(m[1], "") // restored when the test ends
		os.Unsetenv(m[1])
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			v = "secret/" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
		t.Setenv(e.Name, v)
	}
	for _, flagName := range []string{"to", "sink", "from"} {
		name := flagValue(c.Args, flagName)
		if name == "" {
			continue
		}
		d, ok, err := cfg.Lookup(name)
		switch {
		case err != nil:
			t.Errorf("%s: --%s %s: %v (a secret missing from the container's env?)", where, flagName, name, err)
			continue
		case !ok:
			t.Errorf("%s: --%s %s: no such deployment in %s", where, flagName, name, cfgPath)
			continue
		}
		// Every Postgres connection verifies the server (issue 34: require
		// encrypts without checking who answers), with a CA the container
		// mounts from the Secret the README creates.
		for _, l := range []deployment.Layer{deployment.MetaLayer, deployment.ResourcesLayer, deployment.BlobsLayer} {
			u := d.Layer(l)
			if deployment.Scheme(u) != "postgres" {
				continue
			}
			q := u[strings.Index(u, "?")+1:]
			vals, _ := neturl.ParseQuery(q)
			ca := vals.Get("sslrootcert")
			if vals.Get("sslmode") != "verify-full" || ca == "" {
				t.Errorf("%s: --%s %s: %s connects to Postgres with sslmode=%q, sslrootcert=%q; want verify-full with the server's CA", where, flagName, name, l, vals.Get("sslmode"), ca)
				continue
			}
			if !mountsSecret(w.template.Spec, c, path.Dir(ca), "specstar-postgres-ca") {
				t.Errorf("%s: --%s %s: sslrootcert %s is not in the mounted Secret specstar-postgres-ca", where, flagName, name, ca)
			}
		}
		if flagName == "from" {
			if deployment.Scheme(d.Layer(deployment.MetaLayer)) != "postgres" {
				t.Errorf("%s: --from %s: writer tail follows a Postgres meta store, %s has %s", where, name, name, d.Layer(deployment.MetaLayer))
			}
			continue
		}
		if _, err := sink.ParseLayers(sink.Layers{Name: d.Name, Display: d.String(), Meta: d.Layer(deployment.MetaLayer),
			Resources: d.Layer(deployment.ResourcesLayer), Blobs: d.Layer(deployment.BlobsLayer)}); err != nil {
			t.Errorf("%s: --%s %s is not a sink: %v", where, flagName, name, err)
		}
		for _, l := range []deployment.Layer{deployment.MetaLayer, deployment.ResourcesLayer, deployment.BlobsLayer} {
			if u := d.Layer(l); u != "" && deployment.Scheme(u) == "disk" && w.replicas != 1 {
				t.Errorf("%s: %d replicas write the disk store %s of %s; one writer per tree", where, w.replicas, u, name)
			}
		}
	}
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

var credentialName = regexp.MustCompile(`(?i)password|secret|token|credential|access_key|private`)

// userinfoPassword finds the password of URLs such as postgres://u:p@host.
var userinfoPassword = regexp.MustCompile(`[a-z0-9+]+://[^:/@\s]+:([^@\s]*)@`)

// checkSecrets: no Secret is rendered (credentials are created apart and
// referenced), every credential-like environment variable comes from a
// secretKeyRef, and every password in a ConfigMap is a ${VAR}.
func checkSecrets(t *testing.T, r rendered) {
	for _, s := range objectsOf[corev1.Secret](r) {
		t.Errorf("Secret %s is written in the manifests; create it apart and reference it", s.Name)
	}
	// The Secrets a pod cannot start without are those the README tells
	// the operator to create, with the same keys.
	created := map[string]bool{}
	// Every key a `kubectl create secret generic NAME --from-literal=KEY=...
	// --from-file=KEY=...` line of the README creates.
	for _, m := range regexp.MustCompile(`create secret generic (\S+)((?: --from-(?:literal|file)=[^=\s]+=\S+)+)`).FindAllStringSubmatch(mustRead(t, filepath.Join(repoRoot, "docs", "kubernetes.md")), -1) {
		created[m[1]] = true
		for _, k := range regexp.MustCompile(`--from-(?:literal|file)=([^=\s]+)=`).FindAllStringSubmatch(m[2], -1) {
			created[m[1]+"/"+k[1]] = true
		}
	}
	for _, w := range workloads(r) {
		for _, c := range w.template.Spec.Containers {
			for _, e := range c.Env {
				if credentialName.MatchString(e.Name) && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s container %s: %s is not from a secretKeyRef", w, c.Name, e.Name)
				}
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if (ref.Optional == nil || !*ref.Optional) && !created[ref.Name+"/"+ref.Key] {
					t.Errorf("%s container %s: %s needs Secret %s key %s, which the README's deploy section does not create", w, c.Name, e.Name, ref.Name, ref.Key)
				}
			}
		}
		for _, v := range w.template.Spec.Volumes {
			if v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional) && !created[v.Secret.SecretName] {
				t.Errorf("%s: volume %s needs Secret %s, which the README's deploy section does not create", w, v.Name, v.Secret.SecretName)
			}
		}
	}
	for _, cm := range objectsOf[corev1.ConfigMap](r) {
		for key, data := range cm.Data {
			for _, m := range userinfoPassword.FindAllStringSubmatch(data, -1) {
				if !regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*\}$`).MatchString(m[1]) {
					t.Errorf("ConfigMap %s %s: %s holds a literal password; use ${VAR} from a Secret", cm.Name, key, m[0])
				}
			}
		}
	}
}

// checkPDBs: every PodDisruptionBudget selects the pods of a workload
// that can satisfy it while a node drains.
func checkPDBs(t *testing.T, r rendered) {
	pdbs := objectsOf[policyv1.PodDisruptionBudget](r)
	if len(pdbs) == 0 {
		t.Fatal("no PodDisruptionBudget")
	}
	for _, p := range pdbs {
		var matched []workload
		for _, w := range workloads(r) {
			if w.longRunning && selects(t, p.Spec.Selector, w.template.Labels) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			t.Errorf("PodDisruptionBudget %s selects %v, want the pods of one workload", p.Name, matched)
			continue
		}
		w := matched[0]
		switch {
		case p.Spec.MinAvailable != nil && p.Spec.MinAvailable.Type == intstr.Int && p.Spec.MinAvailable.IntVal >= w.replicas:
			t.Errorf("PodDisruptionBudget %s: minAvailable %d of %d replicas of %s blocks every drain", p.Name, p.Spec.MinAvailable.IntVal, w.replicas, w)
		case p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.Type == intstr.Int && p.Spec.MaxUnavailable.IntVal < 1:
			t.Errorf("PodDisruptionBudget %s: maxUnavailable 0 blocks every drain", p.Name)
		case p.Spec.MinAvailable == nil && p.Spec.MaxUnavailable == nil:
			t.Errorf("PodDisruptionBudget %s sets no budget", p.Name)
		}
	}
	// Several replicas are there to stay up: each has a budget.
	for _, w := range workloads(r) {
		if w.longRunning && w.replicas > 1 && !slices.ContainsFunc(pdbs, func(p *policyv1.PodDisruptionBudget) bool {
			return selects(t, p.Spec.Selector, w.template.Labels)
		}) {
			t.Errorf("%s: %d replicas and no PodDisruptionBudget", w, w.replicas)
		}
	}
}

// checkNetworkPolicies: every policy selects pods, every workload's pods
// are selected by one, and every port a policy opens is one the selected
// pods listen on.
func checkNetworkPolicies(t *testing.T, r rendered) {
	nps := objectsOf[networkingv1.NetworkPolicy](r)
	if len(nps) == 0 {
		t.Fatal("no NetworkPolicy")
	}
	ws := workloads(r)
	for _, np := range nps {
		ports := map[string]bool{} // by number and by name
		n := 0
		for _, w := range ws {
			if selects(t, &np.Spec.PodSelector, w.template.Labels) {
				n++
				for _, c := range w.template.Spec.Containers {
					for _, p := range c.Ports {
						ports[fmt.Sprint(p.ContainerPort)], ports[p.Name] = true, true
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("NetworkPolicy %s selects no pods", np.Name)
		}
		for _, in := range np.Spec.Ingress {
			for _, p := range in.Ports {
				if p.Port != nil && !ports[p.Port.String()] {
					t.Errorf("NetworkPolicy %s opens port %s, which none of its pods listens on", np.Name, p.Port.String())
				}
			}
		}
	}
	// The NATS monitoring port answers without authentication (server,
	// account and connection details): only the monitoring namespace may
	// reach it, never the workloads' pods (issue 34's platform review).
	for _, np := range nps {
		for _, in := range np.Spec.Ingress {
			opens := slices.ContainsFunc(in.Ports, func(p networkingv1.NetworkPolicyPort) bool {
				return p.Port != nil && (p.Port.String() == "8222" || p.Port.String() == "monitor")
			})
			if !opens {
				continue
			}
			for _, from := range in.From {
				if ns := from.NamespaceSelector; from.PodSelector != nil || ns == nil || ns.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
					t.Errorf("NetworkPolicy %s opens the NATS monitoring port to %+v; only the monitoring namespace may reach it", np.Name, from)
				}
			}
			if len(in.From) == 0 {
				t.Errorf("NetworkPolicy %s opens the NATS monitoring port to everyone", np.Name)
			}
		}
	}
	for _, w := range ws {
		if !slices.ContainsFunc(nps, func(np *networkingv1.NetworkPolicy) bool { return selects(t, &np.Spec.PodSelector, w.template.Labels) }) {
			t.Errorf("%s: no NetworkPolicy selects its pods", w)
		}
	}
}
