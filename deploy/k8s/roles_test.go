package k8s_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/specstar/replicator/deploy/k8s/internal/natscerts"
	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/internal/testsupport/natscluster"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// regionServer is one NATS server of a rendered region, run on loopback
// with the region's own configuration files.
type regionServer struct {
	url  string // client URL (TLS, the name the certificate holds)
	leaf int    // the leaf-node port (region A)
}

// roleKeys are the seeds (files) and public keys of the four roles, as
// nkeygen makes them.
type roleKeys struct {
	seed map[string]string // role -> seed file
	pub  map[string]string // role -> public key
	raw  map[string]string // role -> seed
}

func makeRoleKeys(t *testing.T) roleKeys {
	t.Helper()
	k := roleKeys{seed: map[string]string{}, pub: map[string]string{}, raw: map[string]string{}}
	dir := t.TempDir()
	for _, role := range natsRoles {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		k.seed[role] = filepath.Join(dir, role+".seed")
		if err := os.WriteFile(k.seed[role], seed, 0o600); err != nil {
			t.Fatal(err)
		}
		k.pub[role], k.raw[role] = pub, string(seed)
	}
	return k
}

// dropBlock removes the top-level block `name { ... }` (nested blocks
// included) from a nats.conf.
func dropBlock(t *testing.T, conf, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*\{`).FindStringIndex(conf)
	if m == nil {
		t.Fatalf("nats.conf has no %s block", name)
	}
	depth := 0
	for i := m[1] - 1; i < len(conf); i++ {
		switch conf[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return conf[:m[0]] + conf[i+1:]
			}
		}
	}
	t.Fatalf("nats.conf: the %s block does not end", name)
	return ""
}

// startRegion runs one server with the rendered configuration of the
// overlay: its authorization, roles, TLS, JetStream domain and leaf-node
// files as rendered. What a single loopback server cannot take is changed:
// the addresses, the store directory, the certificate paths, and the
// cluster block (routes to the other two pods) is left out.
func startRegion(t *testing.T, n natsCluster, tlsDir string, keys roleKeys, leafTo int) regionServer {
	t.Helper()
	server, err := natscluster.Binary()
	if err != nil {
		t.Fatalf("the roles are checked on the go.mod's nats-server: %v", err)
	}
	dir := t.TempDir()
	port, monitor, leaf := freeport.Take(t), freeport.Take(t), freeport.Take(t)
	for name, data := range n.conf {
		data = strings.ReplaceAll(data, natsTLSDir+"/", tlsDir+"/")
		switch name {
		case filepath.Base(n.main):
			data = dropBlock(t, data, "cluster")
			data = regexp.MustCompile(`(?m)^listen: .*$`).ReplaceAllString(data, fmt.Sprintf("listen: 127.0.0.1:%d", port))
			data = regexp.MustCompile(`(?m)^http: .*$`).ReplaceAllString(data, fmt.Sprintf("http: 127.0.0.1:%d", monitor))
			data = regexp.MustCompile(`(?m)^pid_file: .*$`).ReplaceAllString(data, "")
			data = regexp.MustCompile(`(?m)^(\s*)store_dir: .*$`).ReplaceAllString(data, "${1}store_dir: "+filepath.Join(dir, "jetstream"))
			data = regexp.MustCompile(`(?m)^(\s*)max_file_store: .*$`).ReplaceAllString(data, "${1}max_file_store: 1G")
		case "leafnodes.conf":
			data = regexp.MustCompile(`listen: \S+`).ReplaceAllString(data, fmt.Sprintf("listen: 127.0.0.1:%d", leaf))
			data = regexp.MustCompile(`nats-leaf://[^"]+`).ReplaceAllString(data, fmt.Sprintf("nats-leaf://localhost:%d", leafTo))
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(server, "-c", filepath.Join(dir, filepath.Base(n.main)))
	cmd.Env = []string{"POD_NAME=" + n.w.name + "-0", "SPECSTAR_LEAF_SEED=" + keys.raw["leaf"]}
	for _, role := range natsRoles {
		cmd.Env = append(cmd.Env, "SPECSTAR_"+strings.ToUpper(role)+"_NKEY="+keys.pub[role])
	}
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s's server log:\n%s", n.w, log.String())
		}
	})
	s := regionServer{url: fmt.Sprintf("tls://localhost:%d", port), leaf: leaf}
	nc := connectRole(t, s, keys, "stream", tlsDir)
	nc.Close()
	return s
}

// connectRole connects to s as the role's nkey user, waiting for the
// server to listen.
func connectRole(t *testing.T, s regionServer, keys roleKeys, role, tlsDir string) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(keys.seed[role])
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(s.url, opt, nats.RootCAs(filepath.Join(tlsDir, "ca.crt")), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err == nil {
			return nc
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect to %s as %s: %v", s.url, role, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRolesOnTheBus: the rendered regions' NATS configuration gives each
// role what it needs and nothing else. Region A's writer publishes and
// its replicator materializes; region B's stream job makes the mirror over
// the leaf-node link and B's replicator materializes it, equal to the
// archive. Refused: the writer consuming or changing streams, the
// replicator publishing events or changing streams, and a client of
// region B (even B's stream job) publishing into or deleting region A's
// stream through the link.
func TestRolesOnTheBus(t *testing.T) {
	kustomize := kustomizer(t)
	bins := buildImageBinaries(t)
	na := findNATS(t, renderOverlay(t, kustomize, originRegion))
	nb := findNATS(t, renderOverlay(t, kustomize, mirrorRegion))
	tlsDir := filepath.Join(t.TempDir(), "tls")
	if err := natscerts.Generate(tlsDir+"-ca", tlsDir, append(natscerts.DNSNames("specstar", nil), "localhost"), time.Hour); err != nil {
		t.Fatal(err)
	}
	keys := makeRoleKeys(t)
	a := startRegion(t, na, tlsDir, keys, 0)
	b := startRegion(t, nb, tlsDir, keys, a.leaf)
	archive := testfixtures.Path(t, "blobs.acbak")

	run := func(s regionServer, role, bin string, args ...string) (string, error) {
		t.Helper()
		if s != (regionServer{}) {
			args = append(args, "--nats", s.url, "--nats-nkey", keys.seed[role], "--tls-ca", filepath.Join(tlsDir, "ca.crt"))
		}
		if s == b {
			args = append(args, "--mirror-of", "SPECSTAR", "--mirror-domain", "a")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bins, bin), args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(s regionServer, role, bin string, args ...string) string {
		t.Helper()
		out, err := run(s, role, bin, args...)
		if err != nil {
			t.Fatalf("%s %q as %s: %v\n%s", bin, args, role, err, out)
		}
		return out
	}
	refused := func(s regionServer, role, bin string, args ...string) {
		t.Helper()
		out, err := run(s, role, bin, args...)
		if err == nil || !strings.Contains(out, "refused") {
			t.Errorf("%s %q as %s: %v, want refused for the user's permissions\n%s", bin, args, role, err, out)
		}
	}
	messages := func() uint64 {
		t.Helper()
		nc := connectRole(t, a, keys, "stream", tlsDir)
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "SPECSTAR")
		if err != nil {
			t.Fatalf("region A's stream SPECSTAR: %v", err)
		}
		return st.CachedInfo().State.Msgs
	}

	// What each role needs works.
	must(a, "stream", "replicator", "stream", "apply", "--replicas", "1")
	must(a, "writer", "writer", "replay", "--from", archive)
	stored := messages()
	mirrorA := filepath.Join(t.TempDir(), "mirror-a")
	must(a, "replicator", "replicator", "run", "--to", mirrorA, "--until-drained")
	if out := must(regionServer{}, "", "replicator", "verify", "--from", archive, "--to", mirrorA); !strings.Contains(out, "0 differences") {
		t.Errorf("region A's mirror:\n%s", out)
	}
	must(a, "replicator", "replicator", "status")
	must(b, "stream", "replicator", "stream", "apply", "--replicas", "1")
	mirrorB := filepath.Join(t.TempDir(), "mirror-b")
	must(b, "replicator", "replicator", "run", "--to", mirrorB, "--until-drained")
	if out := must(regionServer{}, "", "replicator", "verify", "--from", archive, "--to", mirrorB); !strings.Contains(out, "0 differences") {
		t.Errorf("region B's mirror, over the leaf-node link:\n%s", out)
	}

	// What a role does not need is refused, by the commands and by the
	// bus, whatever the client; each refusal waits for one timeout, so
	// they run at once.
	var wg sync.WaitGroup
	parallel := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	parallel(func() { refused(a, "writer", "replicator", "stream", "apply", "--max-age", "24h") })
	parallel(func() {
		refused(a, "writer", "replicator", "run", "--to", filepath.Join(t.TempDir(), "w"), "--until-drained")
	})
	parallel(func() { refused(a, "replicator", "replicator", "stream", "apply", "--max-age", "24h") })
	parallel(func() { refused(a, "replicator", "writer", "replay", "--from", testfixtures.Path(t, "small.acbak")) })
	for _, c := range []struct {
		server regionServer
		role   string
		domain string // the JetStream domain the client addresses
	}{
		{a, "writer", ""},
		{a, "replicator", ""},
		{b, "stream", "a"}, // region B's admin, through the leaf-node link
		{b, "replicator", "a"},
	} {
		who := fmt.Sprintf("the %s of region %s", c.role, map[regionServer]string{a: "A", b: "B"}[c.server])
		nc := connectRole(t, c.server, keys, c.role, tlsDir)
		defer nc.Close()
		js, err := jetstream.NewWithDomain(nc, c.domain)
		if c.domain == "" {
			js, err = jetstream.New(nc)
		}
		if err != nil {
			t.Fatal(err)
		}
		local, _ := jetstream.New(nc)
		attempt := func(f func(ctx context.Context) error) error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			return f(ctx)
		}
		parallel(func() {
			if err := attempt(func(ctx context.Context) error { return js.DeleteStream(ctx, "SPECSTAR") }); err == nil {
				t.Errorf("%s deleted region A's stream", who)
			}
		})
		parallel(func() {
			if err := attempt(func(ctx context.Context) error {
				_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: "SPECSTAR", Subjects: []string{"specstar.>"}, MaxAge: time.Hour})
				return err
			}); err == nil {
				t.Errorf("%s changed region A's stream", who)
			}
		})
		if c.role == "writer" {
			continue // it may publish events
		}
		// A publish that lands is acknowledged with a sequence; a refused
		// one gets no acknowledgement.
		parallel(func() {
			_ = attempt(func(ctx context.Context) error {
				pa, err := local.Publish(ctx, "specstar.intruder.create", []byte("x"))
				if err == nil {
					t.Errorf("%s published into region A's stream: sequence %d", who, pa.Sequence)
				}
				return err
			})
		})
	}
	wg.Wait()
	if got := messages(); got != stored {
		t.Errorf("region A's stream holds %d messages, %d before the refused calls", got, stored)
	}
}
