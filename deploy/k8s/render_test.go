package k8s_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// newObject is an empty object of the Kubernetes API type that apiVersion
// and kind name, or false for a kind these manifests should not hold.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "batch/v1 Job":
		return &batchv1.Job{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "coordination.k8s.io/v1 Lease":
		return &coordinationv1.Lease{}, true
	case "rbac.authorization.k8s.io/v1 Role":
		return &rbacv1.Role{}, true
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		return &rbacv1.RoleBinding{}, true
	}
	return nil, false
}

// decodeStrict decodes one YAML document into the API type its apiVersion
// and kind name; a field that type does not have is an error, as an
// unknown kind is.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("apiVersion and kind: %w", err)
	}
	obj, ok := newObject(tm.APIVersion, tm.Kind)
	if !ok {
		return nil, fmt.Errorf("unknown kind %q of apiVersion %q", tm.Kind, tm.APIVersion)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// splitDocuments splits a multi-document YAML stream, dropping empty
// documents.
func splitDocuments(raw []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// kustomizer returns the command that renders a kustomization directory:
// `kubectl kustomize` where kubectl embeds kustomize v4 or later (older
// ones lack labels: and patches:), else a `kustomize` binary. No
// renderer fails the test: .ci/run installs kubectl.
func kustomizer(t *testing.T) func(dir string) ([]byte, error) {
	t.Helper()
	var tried []string
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, _ := exec.Command(kubectl, "version", "--client", "-o", "json").Output()
		var v struct {
			Kustomize string `json:"kustomizeVersion"`
		}
		json.Unmarshal(out, &v)
		major, _, _ := strings.Cut(strings.TrimPrefix(v.Kustomize, "v"), ".")
		if n, err := strconv.Atoi(major); err == nil && n >= 4 {
			return func(dir string) ([]byte, error) { return run(kubectl, "kustomize", dir) }
		}
		tried = append(tried, fmt.Sprintf("%s embeds kustomize %q (want v4 or later)", kubectl, v.Kustomize))
	} else {
		tried = append(tried, "no kubectl on the PATH")
	}
	if kustomize, err := exec.LookPath("kustomize"); err == nil {
		return func(dir string) ([]byte, error) { return run(kustomize, "build", dir) }
	}
	tried = append(tried, "no kustomize on the PATH")
	t.Fatalf("cannot render deploy/k8s: %s. Install kubectl (apt-get install kubectl or kubernetes-client; .ci/run does) "+
		"or go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0", strings.Join(tried, "; "))
	return nil
}

func run(name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// rendered is one overlay rendered and decoded.
type rendered struct {
	name    string
	objects []any
}

// renderOverlay renders deploy/k8s/overlays/name and decodes every
// document strictly.
func renderOverlay(t *testing.T, kustomize func(string) ([]byte, error), name string) rendered {
	t.Helper()
	raw, err := kustomize(filepath.Join("overlays", name))
	if err != nil {
		t.Fatalf("overlay %s: %v", name, err)
	}
	docs, err := splitDocuments(raw)
	if err != nil {
		t.Fatalf("overlay %s: split the rendered YAML: %v", name, err)
	}
	r := rendered{name: name}
	for i, doc := range docs {
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("overlay %s: document %d: %v\n%s", name, i, err, doc)
		}
		r.objects = append(r.objects, obj)
	}
	return r
}

// overlays lists deploy/k8s/overlays.
func overlays(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("overlays")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) < 2 {
		t.Fatalf("overlays: %q, want a region and its mirror", names)
	}
	return names
}

// TestStrictDecoding: the decoder the manifest tests use rejects what a
// cluster would: an unknown field, a misplaced one, a wrong type, an
// unknown kind.
func TestStrictDecoding(t *testing.T) {
	good := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers: [{name: c, image: i}]\n"
	if _, err := decodeStrict([]byte(good)); err != nil {
		t.Fatalf("a valid Deployment: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":  strings.Replace(good, "replicas: 1", "replicaz: 1", 1),
		"misplaced":      strings.Replace(good, "containers: [{name: c, image: i}]", "containers: [{name: c, image: i, livenessProbe: {path: /healthz}}]", 1),
		"wrong type":     strings.Replace(good, "replicas: 1", "replicas: one", 1),
		"duplicate key":  strings.Replace(good, "replicas: 1", "replicas: 1\n  replicas: 2", 1),
		"unknown kind":   strings.Replace(good, "kind: Deployment", "kind: Deploymnet", 1),
		"unknown group":  strings.Replace(good, "apps/v1", "apps/v1beta1", 1),
		"not a document": "- just\n- a list\n",
	} {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// TestBaseRenders: the base renders on its own too (an overlay is the
// base plus a region's settings).
func TestBaseRenders(t *testing.T) {
	kustomize := kustomizer(t)
	for _, dir := range []string{"base", "publisher"} {
		raw, err := kustomize(dir)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitDocuments(raw)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docs {
			if _, err := decodeStrict(doc); err != nil {
				t.Errorf("%s: document %d: %v", dir, i, err)
			}
		}
	}
}

// flagValue is the value of --name=V or --name V in args ("" if absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v
		}
		if a == "-"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// portOf is the port number of an address such as 0.0.0.0:9464 (0 if
// it has none).
func portOf(addr string) int32 {
	n, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	return int32(n)
}
