package stream

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embedded is a JetStream server run inside this process, used when no
// NATS URL is given. Its data directory is shared by the commands of one
// machine: the first process to take the directory's lock runs the server
// on a loopback port and records its URL; later processes connect to that
// URL as clients instead of starting a second server on the same files.
// When the host leaves, a client takes the lock and the server over
// (Bus.keepEmbedded), and clients always dial the URL the directory names
// (dirDialer).
type embedded struct {
	srv   *server.Server
	lock  *os.File
	url   string
	token string
}

const (
	lockFile  = "embedded.lock"
	urlFile   = "embedded.url"
	tokenFile = "embedded.token" // mode 0600: only its owner can connect
	syncFile  = "embedded.sync"  // the host's fsync policy, for the processes that join
)

// embeddedToken returns the token that the embedded server of dataDir
// requires of every client, creating it (random, mode 0600) when the
// directory has none. Without it, any local user could connect to the
// loopback port and publish, a PurgeRecord deleting resources included.
func embeddedToken(dataDir string, create bool) (string, error) {
	path := filepath.Join(dataDir, tokenFile)
	b, err := os.ReadFile(path)
	if err == nil && len(bytes.TrimSpace(b)) > 0 {
		return string(bytes.TrimSpace(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("embedded NATS token %s: %w", path, err)
	}
	if !create {
		return "", fmt.Errorf("embedded NATS token %s: missing", path)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("embedded NATS token: %w", err)
	}
	tok := hex.EncodeToString(raw)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok), 0o600); err != nil {
		return "", fmt.Errorf("embedded NATS token %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("embedded NATS token %s: %w", path, err)
	}
	return tok, nil
}

// startOrJoinEmbedded returns the URL of the embedded server for dataDir
// and the token it requires, starting it (and returning it as e) if no
// other process runs it; it waits (until deadline) for a host still
// starting, and hosts the server itself if the host lets go meanwhile.
func startOrJoinEmbedded(cfg Config, log *slog.Logger, deadline time.Time) (e *embedded, url, token string, err error) {
	dataDir := cfg.DataDir
	if err := privateDataDir(dataDir); err != nil {
		return nil, "", "", err
	}
	start, said := time.Now(), time.Now()
	for {
		e, err = tryHostEmbedded(cfg, 0)
		if err != nil {
			return nil, "", "", err
		}
		if e != nil {
			log.Info("started embedded NATS JetStream server", "url", e.url, "data_dir", dataDir)
			return e, e.url, e.token, nil
		}
		// Another process holds the directory: join it once the server it
		// runs answers at the URL it published (a URL left by a host that
		// is gone does not answer); take over if it lets go of the lock.
		if url := currentURL(dataDir); url != "" && answers(url) {
			token, err := embeddedToken(dataDir, false)
			if err != nil {
				return nil, "", "", fmt.Errorf("join the embedded NATS server of %s: %w", dataDir, err)
			}
			log.Info("joining the embedded NATS server another process runs", "url", url, "data_dir", dataDir)
			return nil, url, token, nil
		}
		if time.Now().After(deadline) {
			return nil, "", "", fmt.Errorf("embedded NATS data dir %s is locked by another process that published no URL its server answers at within %s", dataDir, time.Since(start).Round(time.Second))
		}
		if time.Since(said) >= 5*time.Second {
			said = time.Now()
			log.Info("waiting for the process that holds the embedded NATS data dir to start its server", "data_dir", dataDir, "waited", time.Since(start).Round(time.Second).String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// joinWait bounds how long a process waits for the one holding the data
// directory to start its server (recovering a large stream takes time).
const joinWait = 2 * time.Minute

// lockFree reports whether no process holds dataDir's lock (taking and
// releasing it to tell).
func lockFree(dataDir string) bool {
	f, err := os.OpenFile(filepath.Join(dataDir, lockFile), os.O_RDWR, 0)
	if err != nil {
		return true
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

// answers reports whether something listens at url's address.
func answers(url string) bool {
	addr := strings.TrimPrefix(url, "nats://")
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// tryHostEmbedded takes cfg.DataDir's lock and starts the embedded server
// on it, on port if that is not 0 and can be bound, else on a random
// loopback port, and records its URL in the directory. It returns nil, nil
// when another process holds the lock (and so runs the server).
func tryHostEmbedded(cfg Config, port int) (*embedded, error) {
	dataDir := cfg.DataDir
	lf, err := os.OpenFile(filepath.Join(dataDir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS lock: %w", err)
	}
	_ = lf.Chmod(0o600) // a lock file an earlier version left 0644
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("embedded NATS lock %s: %w", dataDir, err)
	}
	token, err := embeddedToken(dataDir, true)
	if err != nil {
		lf.Close()
		return nil, err
	}
	tlsConfig, err := embeddedServerTLS(dataDir)
	if err != nil {
		lf.Close()
		return nil, err
	}
	if port != 0 && !canBind(port) {
		port = 0
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "specstar-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(dataDir, "jetstream"),
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: cfg.MaxPayload,
		// JetStreamDomain names this server's JetStream in leaf-node
		// setups (Config.Domain); empty is nats-server's default.
		JetStreamDomain: cfg.Domain,
		Authorization:   token,
		// Clients joining through the data directory insist on TLS with
		// the directory's certificate (embeddedClientTLS); a client
		// handed Bus.URL() as --nats may still connect in plain text.
		TLSConfig:   tlsConfig,
		TLSTimeout:  10, // seconds: a handshake on a loaded machine
		AllowNonTLS: true,
	}
	// Config.SyncInterval: "always" unless an interval was chosen, so
	// that JetStream's acknowledgement means the event is on disk.
	if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	} else {
		opts.SyncAlways = true
	}
	srv, err := startServer(opts)
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("embedded NATS server in %s: %w", dataDir, err)
	}
	// nats://, not the tls:// of srv.ClientURL(): a client joining
	// through the directory insists on TLS itself (nats.Secure), and one
	// handed Bus.URL() as --nats may speak plain text.
	url := "nats://" + srv.Addr().String()
	// The fsync policy first, so a process that joins by the URL finds it
	// (Bus.SyncPolicy).
	if p, ok := serverSync(srv); ok {
		tmp := filepath.Join(dataDir, syncFile+".tmp")
		if err := os.WriteFile(tmp, []byte(p), 0o600); err == nil {
			_ = os.Rename(tmp, filepath.Join(dataDir, syncFile))
		}
	}
	tmp := filepath.Join(dataDir, urlFile+".tmp")
	if err := os.WriteFile(tmp, []byte(url), 0o600); err == nil {
		_ = os.Rename(tmp, filepath.Join(dataDir, urlFile))
	}
	return &embedded{srv: srv, lock: lf, url: url, token: token}, nil
}

// startServer starts a server with opts. A port that another process
// bound after canBind said it was free (a squatter, or a second process
// taking over at the same moment) fails the server's listener at once:
// it starts over on a random port then, instead of waiting out
// ReadyForConnections, which does not look at why it is not ready, so
// that a takeover never stalls on a stolen port.
func startServer(opts *server.Options) (*server.Server, error) {
	for {
		srv, err := server.NewServer(opts)
		if err != nil {
			return nil, err
		}
		fatal := make(chan string, 1)
		srv.SetLogger(fatalLogger(fatal), false, false)
		srv.Start()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if srv.ReadyForConnections(50 * time.Millisecond) {
				return srv, nil
			}
			select {
			case msg := <-fatal:
				srv.Shutdown()
				if opts.Port == server.RANDOM_PORT {
					return nil, errors.New(msg)
				}
				opts.Port = server.RANDOM_PORT
			default:
				if time.Now().Before(deadline) {
					continue
				}
				srv.Shutdown()
				return nil, errors.New("did not start within 30s")
			}
			break
		}
	}
}

// fatalLogger passes the embedded server's fatal errors (its listener's,
// which it does not act on itself) to startServer, and drops the rest, as
// NoLog does.
type fatalLogger chan<- string

func (f fatalLogger) Fatalf(format string, v ...any) {
	select {
	case f <- fmt.Sprintf(format, v...):
	default:
	}
}
func (fatalLogger) Noticef(string, ...any) {}
func (fatalLogger) Warnf(string, ...any)   {}
func (fatalLogger) Errorf(string, ...any)  {}
func (fatalLogger) Debugf(string, ...any)  {}
func (fatalLogger) Tracef(string, ...any)  {}

// privateDataDir makes dataDir (0700) if it does not exist and refuses one
// that another user owns or can write to: whoever can write there can
// take the lock (so every command of the owner fails) or replace the
// server's certificate. One the owner alone can write but others can read
// (an earlier version made it 0755) is made 0700.
func privateDataDir(dataDir string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("embedded NATS data dir %s: %w", dataDir, err)
	}
	st, err := os.Stat(dataDir)
	if err != nil {
		return fmt.Errorf("embedded NATS data dir %s: %w", dataDir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("embedded NATS data dir %s: not a directory", dataDir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("embedded NATS data dir %s: owned by uid %d, not by this user (uid %d); give --data-dir a directory of your own", dataDir, sys.Uid, os.Getuid())
	}
	perm := st.Mode().Perm()
	if perm&0o022 != 0 {
		return fmt.Errorf("embedded NATS data dir %s: other users can write to it (mode %04o); run chmod 700 on it or give --data-dir a directory of your own", dataDir, perm)
	}
	if perm&0o077 != 0 {
		if err := os.Chmod(dataDir, 0o700); err != nil {
			return fmt.Errorf("embedded NATS data dir %s: make it private: %w", dataDir, err)
		}
	}
	return nil
}

// canBind reports whether a loopback listener can be opened on port now.
func canBind(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// currentURL is the URL the data directory names now ("" if none).
func currentURL(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, urlFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// dirDialer dials the embedded server the data directory names at the
// time of the dial (its URL file) rather than the address nats.go asks
// for, so a client follows the server to a new port when another process
// takes it over; without a URL file it dials the address asked for. It
// remembers the address it last connected to.
type dirDialer struct {
	dataDir string
	net     net.Dialer
	last    atomic.Pointer[string]
}

// Dial implements nats.CustomDialer.
func (d *dirDialer) Dial(network, address string) (net.Conn, error) {
	if u, err := neturl.Parse(currentURL(d.dataDir)); err == nil && u.Host != "" {
		address = u.Host
	}
	c, err := d.net.Dial(network, address)
	if err == nil {
		d.last.Store(&address)
	}
	return c, err
}

// lastAddr is the host:port last connected to ("" before any).
func (d *dirDialer) lastAddr() string {
	if a := d.last.Load(); a != nil {
		return *a
	}
	return ""
}

// port is the port of lastAddr (0 if none).
func (d *dirDialer) port() int {
	_, p, err := net.SplitHostPort(d.lastAddr())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

func (e *embedded) stop() {
	if e == nil {
		return
	}
	_ = os.Remove(filepath.Join(filepath.Dir(e.lock.Name()), urlFile))
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.lock.Close() // releases the flock
}

// SyncPolicy is when the embedded server flushes its stream files
// ("always", or an interval), for `replicator doctor`: the server's own
// setting where this process hosts it, else what its host recorded in the
// data directory. ok is false for an external server (a server does not
// report it to clients).
func (b *Bus) SyncPolicy() (policy string, ok bool) {
	b.embMu.Lock()
	defer b.embMu.Unlock()
	if b.emb != nil && b.emb.srv != nil {
		return serverSync(b.emb.srv)
	}
	if b.cfg.URL != "" {
		return "", false
	}
	raw, err := os.ReadFile(filepath.Join(b.cfg.DataDir, syncFile))
	if err != nil || len(bytes.TrimSpace(raw)) == 0 {
		return "", false
	}
	return string(bytes.TrimSpace(raw)), true
}

// serverSync is srv's fsync policy.
func serverSync(srv *server.Server) (string, bool) {
	jc := srv.JetStreamConfig()
	switch {
	case jc == nil:
		return "", false
	case jc.SyncAlways:
		return "always", true
	case jc.SyncInterval > 0:
		return jc.SyncInterval.String(), true
	}
	return "2m0s", true // nats-server's default (defaultSyncInterval)
}
