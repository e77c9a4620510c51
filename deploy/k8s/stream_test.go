package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/specstar/replicator/internal/testsupport/freeport"
)

// freePorts reserves n loopback ports for the test (outside the
// ephemeral range, so no outgoing connection takes one before its server
// binds).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ports = append(ports, freeport.Take(t))
	}
	return ports
}

// startCluster starts a JetStream cluster of n in-process servers on
// loopback, routed to each other as the manifests' servers are, and
// returns a client URL once JetStream answers. Clients must log in as the
// nkey user whose seed file is seed, as the manifests' servers require.
func startCluster(t *testing.T, n int, seed string) string {
	t.Helper()
	ports := freePorts(t, n)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var url string
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("nats-%d", i),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   filepath.Join(t.TempDir(), "jetstream"),
			Cluster:    server.ClusterOpts{Name: "specstar-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			NoSigs:     true,
			NoLog:      true,
			Nkeys:      []*server.NkeyUser{{Nkey: nkeyPublic(t, seed)}},
		}
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		if !srv.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %d did not start", i)
		}
		if i == 0 {
			url = srv.ClientURL()
		}
	}
	nc := connectNkey(t, url, seed)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %d-server JetStream cluster has no leader after 60s: %v", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStreamJobCreatesR3: the origin region's stream Job, run by the
// binary the Dockerfile builds with the region's own specstar.yaml
// (only nats.url pointed at a local cluster), creates the stream with one
// replica on each of the three servers.
func TestStreamJobCreatesR3(t *testing.T) {
	kustomize := kustomizer(t)
	bins := buildImageBinaries(t)
	r := renderOverlay(t, kustomize, originRegion)
	n := findNATS(t, r)
	var job workload
	for _, w := range workloads(r) {
		if c := w.template.Spec.Containers[0]; w.kind == "Job" && len(c.Args) > 1 && c.Args[0] == "stream" && c.Args[1] == "apply" {
			job = w
		}
	}
	if job.name == "" {
		t.Fatal("no Job runs replicator stream apply")
	}
	c := job.template.Spec.Containers[0]
	cfgPath := flagValue(c.Args, "config")
	raw, ok := mountedFile(r, job.template.Spec, c, cfgPath)
	if !ok {
		t.Fatalf("%s: --config %s is not mounted", job, cfgPath)
	}

	// The local cluster requires an nkey login, as the manifests' servers
	// do, but speaks no TLS: the Job's --nats-nkey is pointed at a seed made
	// here and its --tls-ca dropped (checkSecured holds the manifests to TLS).
	seed := writeNkeySeed(t)
	url := startCluster(t, int(n.w.replicas), seed)
	urlLine := regexp.MustCompile(`(?m)^(\s+url:\s*)nats://\S+`)
	if !urlLine.MatchString(raw) {
		t.Fatalf("specstar.yaml has no nats url: line")
	}
	local := filepath.Join(t.TempDir(), "specstar.yaml")
	if err := os.WriteFile(local, []byte(urlLine.ReplaceAllString(raw, "${1}"+url)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		if strings.HasPrefix(a, "--config=") {
			args[i] = "--config=" + local
		}
		if strings.HasPrefix(a, "--nats-nkey=") {
			args[i] = "--nats-nkey=" + seed
		}
	}
	if !slices.Contains(args, "--nats-nkey="+seed) {
		t.Fatalf("%s: the Job logs in with no --nats-nkey: %q", job, c.Args)
	}
	args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, "--tls-ca=") })
	cmd := exec.Command(filepath.Join(bins, c.Command[0]), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: replicator %q: %v\n%s", job, args, err, out)
	}

	nc := connectNkey(t, url, seed)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := specstarConfig(t, r).NATS["stream"]
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("after the Job: %v\n%s", err, out)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas)+1 != 3 {
		t.Errorf("stream %s: %d replicas configured, cluster %+v; want 3, one per server", name, info.Config.Replicas, info.Cluster)
	}
}

// writeNkeySeed makes a new nkey user and writes its seed, as the
// README's nkeygen step does, to a 0600 file; it returns the file's path.
func writeNkeySeed(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nkey.seed")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// nkeyPublic is the public key of the nkey seed in the file seed.
func nkeyPublic(t *testing.T, seed string) string {
	t.Helper()
	raw, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed(raw)
	if err != nil {
		t.Fatalf("%s: %v", seed, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// connectNkey connects to url as the nkey user of the seed file seed.
func connectNkey(t *testing.T, url, seed string) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatalf("%s: %v", seed, err)
	}
	nc, err := nats.Connect(url, opt)
	if err != nil {
		t.Fatalf("connect %s as the nkey user: %v", url, err)
	}
	return nc
}
