// Package natscluster runs a JetStream cluster of real nats-server
// processes on loopback for tests: each node its own process, ports and
// store directory, so that a test can kill one (SIGKILL), wipe its store
// and start it again, as an operator's failure would.
package natscluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
)

// BinaryEnv names the nats-server binary to run instead of the one
// Binary builds.
const BinaryEnv = "SPECSTAR_NATS_SERVER"

// Binary is the nats-server binary the cluster runs: $SPECSTAR_NATS_SERVER
// if set, else the nats-server of this module's go.mod (the version the
// embedded server runs and deploy/k8s deploys), built once into the
// temporary directory. The machine's own nats-server may be far older
// (Debian's is 2.9.10): a cluster test is about the server we ship with.
func Binary() (string, error) {
	if b := os.Getenv(BinaryEnv); b != "" {
		return b, nil
	}
	// The tests run inside this module, whose go.mod pins the version
	// (a test binary's build info lists no dependencies).
	v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", serverModule).Output()
	version := strings.TrimSpace(string(v))
	if err != nil || version == "" {
		return "", fmt.Errorf("the version of %s in go.mod (go list -m: %v): name a nats-server binary in $%s", serverModule, err, BinaryEnv)
	}
	bin := filepath.Join(os.TempDir(), "specstar-nats-server-"+version, "nats-server")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("nats-server %s: %w", version, err)
	}
	// Built beside its place and renamed into it, so that test binaries
	// building at once never run a half-written one.
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	out, err := exec.Command("go", "build", "-o", tmp, serverModule).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build nats-server %s (or name one in $%s): %v\n%s", version, BinaryEnv, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("nats-server %s: %w", version, err)
	}
	return bin, nil
}

// serverModule is the nats-server module (its root is the command).
const serverModule = "github.com/nats-io/nats-server/v2"

// Node is one server of the cluster.
type Node struct {
	Name        string
	Port        int    // client port
	ClusterPort int    // route port
	MonitorPort int    // HTTP monitoring (/jsz, /healthz)
	StoreDir    string // its JetStream store
	Log         string // its log file
	cmd         *exec.Cmd
	exited      chan struct{}
}

// URL is the node's client URL.
func (n *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

// Cluster is a running cluster; Start stops it when the test ends.
type Cluster struct {
	tb    testing.TB
	bin   string
	Name  string
	Nodes []*Node
}

// Start starts n nodes (their own processes, loopback ports and store
// directories under the test's temporary directory) and waits until
// JetStream answers. It fails the test when no nats-server binary is
// found. The processes die with the test binary (Pdeathsig).
func Start(tb testing.TB, n int) *Cluster {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{tb: tb, bin: bin, Name: "specstar-test"}
	dir := tb.TempDir()
	for i := range n {
		c.Nodes = append(c.Nodes, &Node{
			Name:        fmt.Sprintf("n%d", i+1),
			Port:        freeport.Take(tb),
			ClusterPort: freeport.Take(tb),
			MonitorPort: freeport.Take(tb),
			StoreDir:    filepath.Join(dir, fmt.Sprintf("n%d", i+1), "store"),
			Log:         filepath.Join(dir, fmt.Sprintf("n%d", i+1), "server.log"),
		})
	}
	tb.Cleanup(func() {
		for i := range c.Nodes {
			c.Kill(i)
		}
	})
	for i := range c.Nodes {
		c.Restart(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitJetStream(ctx); err != nil {
		tb.Fatalf("cluster of %d: %v", n, err)
	}
	return c
}

// URLs is every node's client URL, comma-separated, as --nats takes them.
func (c *Cluster) URLs() string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.URL())
	}
	return strings.Join(out, ",")
}

// Restart starts node i (again): same name, ports and store directory
// (which Wipe may have emptied). It waits until the node takes clients.
func (c *Cluster) Restart(i int) {
	c.tb.Helper()
	n := c.Nodes[i]
	if n.cmd != nil {
		c.tb.Fatalf("node %s is running", n.Name)
	}
	if err := os.MkdirAll(n.StoreDir, 0o755); err != nil {
		c.tb.Fatal(err)
	}
	var routes []string
	for _, o := range c.Nodes {
		if o != n {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.ClusterPort))
		}
	}
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(c.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.Port), "-n", n.Name,
		"-js", "-sd", n.StoreDir, "-m", strconv.Itoa(n.MonitorPort),
		"--cluster_name", c.Name, "-cluster", fmt.Sprintf("nats://127.0.0.1:%d", n.ClusterPort),
		"-routes", strings.Join(routes, ","))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with a killed test binary
	if err := cmd.Start(); err != nil {
		c.tb.Fatalf("start %s: %v", n.Name, err)
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.exited)
	wait := waitfor.Scaled(30 * time.Second) // a loaded machine starts it slowly
	deadline := time.Now().Add(wait)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.Port), time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-n.exited:
			c.tb.Fatalf("nats-server %s exited at start; its log %s:\n%s", n.Name, n.Log, readTail(n.Log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("nats-server %s takes no clients after %s; its log:\n%s", n.Name, wait, readTail(n.Log))
		}
	}
}

// Kill kills node i with SIGKILL (no shutdown of any kind) and waits
// until it is gone; a node that is down stays down.
func (c *Cluster) Kill(i int) {
	n := c.Nodes[i]
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.cmd = nil
}

// Wipe removes node i's store (the node must be down): it comes back
// empty and has to catch up from the others.
func (c *Cluster) Wipe(i int) {
	c.tb.Helper()
	n := c.Nodes[i]
	if n.cmd != nil {
		c.tb.Fatalf("wipe %s: the node is running", n.Name)
	}
	if err := os.RemoveAll(n.StoreDir); err != nil {
		c.tb.Fatal(err)
	}
}

// Index is the index of the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.Nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// connect is a client of every node that is up.
func (c *Cluster) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// WaitJetStream waits until the cluster's JetStream answers (a meta
// leader is elected).
func (c *Cluster) WaitJetStream(ctx context.Context) error {
	nc, js, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("JetStream does not answer: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StreamInfo is stream's info as its leader answers it, waiting (until
// ctx ends) for a leader.
func (c *Cluster) StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	nc, js, err := c.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var info *jetstream.StreamInfo
		st, err := js.Stream(actx, stream)
		if err == nil {
			info = st.CachedInfo()
		}
		cancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stream %s has no leader: %v", stream, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Leader is the index of the node that leads stream now.
func (c *Cluster) Leader(ctx context.Context, stream string) (int, error) {
	info, err := c.StreamInfo(ctx, stream)
	if err != nil {
		return -1, err
	}
	i := c.Index(info.Cluster.Leader)
	if i < 0 {
		return -1, fmt.Errorf("stream %s: leader %q is no node of this cluster", stream, info.Cluster.Leader)
	}
	return i, nil
}

// LocalState is what one node itself holds of a stream, read from its
// monitoring endpoint (/jsz), not from the stream's leader.
type LocalState struct {
	Messages uint64 `json:"messages"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// Local reads node i's own copy of stream (ok false when it holds none).
func (c *Cluster) Local(ctx context.Context, i int, stream string) (st LocalState, ok bool, err error) {
	n := c.Nodes[i]
	url := fmt.Sprintf("http://127.0.0.1:%d/jsz?accounts=true&streams=true", n.MonitorPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, false, fmt.Errorf("%s /jsz: %w", n.Name, err)
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name  string     `json:"name"`
				State LocalState `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return st, false, fmt.Errorf("%s /jsz: %w", n.Name, err)
	}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if s.Name == stream {
				return s.State, true, nil
			}
		}
	}
	return st, false, nil
}

// LogTail is the end of node i's log, for a failure message.
func (c *Cluster) LogTail(i int) string { return readTail(c.Nodes[i].Log) }

// readTail is the end of a log file, for a failure message.
func readTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
