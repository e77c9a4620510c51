// Package stream is the JetStream side of the engine: it connects to a NATS
// server (or runs one embedded), keeps the event stream, its dead-letter
// stream and the blob object store configured, and publishes and reads
// DumpRecord events.
package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/redact"
)

// Config says where the stream lives and how it is kept.
type Config struct {
	// URL of an external NATS server or cluster; empty runs (or joins) an
	// embedded server in DataDir.
	URL string
	// DataDir is the embedded server's storage.
	DataDir string
	// Stream is the event stream's name (default SPECSTAR).
	Stream string
	// SubjectPrefix starts every event subject (default "specstar").
	SubjectPrefix string
	// Replicas of the stream on a cluster (default 1).
	Replicas int
	// MaxAge and MaxBytes bound the stream (0: unlimited).
	MaxAge   time.Duration
	MaxBytes int64
	// Retention is "limits" (default), "interest" or "workqueue".
	Retention string
	// InMemory creates the event stream with memory storage: for a
	// private stream that lives as long as one process and holds a
	// bounded backlog (mirror's, with workqueue retention and paced
	// publishing), where the file store would keep every block it wrote
	// in a memory cache for 10 s, which at a fast sink's rate costs more
	// memory than the backlog itself. An existing stream keeps its storage.
	InMemory bool
	// DuplicateWindow is how long JetStream remembers message ids to drop
	// re-published records (default 1h).
	DuplicateWindow time.Duration
	// MaxPayload of the embedded server (default 1 MiB, as nats-server's).
	MaxPayload int32
	// SyncInterval is how often the embedded server flushes its stream
	// files to disk. 0 (the default) is nats-server's sync_interval
	// "always": every stored event is fsynced before JetStream
	// acknowledges it, so an acknowledged event survives a power cut. A
	// positive interval (nats-server's own default is 2m) is faster, but
	// a power cut loses what was acknowledged since the last flush.
	// An external server's policy is set in its own configuration.
	SyncInterval time.Duration
	// Domain is the JetStream domain of the embedded server (empty: none).
	// It names a region in a leaf-node setup, so that another region can
	// mirror this one's stream with MirrorDomain. An external server's
	// domain is set in its own configuration (jetstream { domain: a }).
	Domain string
	// MirrorOf is the name of an upstream stream, usually another region's,
	// that the event stream mirrors. Empty (the default): the event stream
	// is the origin and takes publishes on SubjectPrefix.>. Set: the event
	// stream is a read-only mirror of MirrorOf (same sequence numbers, no
	// subjects of its own), the upstream's blob object store
	// MirrorOf_BLOBS is mirrored too (its stream OBJ_MirrorOf_BLOBS), and
	// the dead-letter stream and positions bucket stay local.
	MirrorOf string
	// MirrorDomain is the JetStream domain of the upstream stream in a
	// leaf-node setup: the mirror reaches it through the API prefix
	// "$JS.<MirrorDomain>.API". Empty: the upstream is in this server's
	// own domain (or MirrorAPIPrefix says where).
	MirrorDomain string
	// MirrorAPIPrefix is the upstream's external JetStream API prefix, for
	// account imports that do not follow the domain convention; it takes
	// precedence over MirrorDomain.
	MirrorAPIPrefix string
	// Given names the stream settings the user set explicitly (by their
	// flag names: see Settings). Open never changes an existing stream: a
	// setting given here that differs from the stream is an error naming
	// it, and settings not given are taken from the stream. Changing a
	// stream is an explicit act (Apply).
	Given map[string]bool
	// Auth are the credentials and TLS files of an external server (URL
	// set); user/password or a token ride in the URL itself.
	Auth Auth
	// ReadOnly opens existing streams only: Open creates nothing, and a
	// missing event stream is an error that lists the streams there. For
	// commands that only look (status, dlq list, verify).
	ReadOnly bool
	// UnavailableTimeout bounds how long a call to the JetStream API waits
	// for an unavailable cluster (leader elections, a lost quorum) before
	// it fails (Retry): 0 is DefaultUnavailableTimeout, a negative value
	// waits until the context ends (a service that must never exit for
	// it).
	UnavailableTimeout time.Duration
	// WaitForServer makes Open, for a service, wait for an external
	// server it cannot reach (not yet started, a pod still scheduling):
	// it retries with backoff up to MaxConnectBackoff apart, logging each
	// attempt, until the server answers or ctx ends. A refused credential,
	// a TLS failure or a malformed URL still fail at once. False (batch
	// commands): the first failure is the error.
	WaitForServer bool
}

// MaxConnectBackoff bounds the time between two attempts of a
// WaitForServer Open to reach its server.
const MaxConnectBackoff = 15 * time.Second

// Settings are the names of the stream settings a Config can give, as
// the commands' flags spell them.
var Settings = []string{"subject-prefix", "replicas", "max-age", "max-bytes", "retention", "duplicate-window", "mirror-of"}

// DefaultDataDir is where the embedded server keeps its files unless told
// otherwise: $XDG_STATE_HOME/specstar-replicator/nats, or ./.specstar/nats.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "specstar-replicator", "nats")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "specstar-replicator", "nats")
	}
	return filepath.Join(".specstar", "nats")
}

func (c *Config) defaults() {
	if c.Stream == "" {
		c.Stream = "SPECSTAR"
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = "specstar"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = time.Hour
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = 1 << 20
	}
}

// Bus is a connection to the event stream.
type Bus struct {
	cfg Config
	// embMu guards emb, which a Bus that joined an embedded server sets
	// when it takes the server over (keepEmbedded).
	embMu  sync.Mutex
	emb    *embedded
	dialer *dirDialer     // embedded server: dials what the data directory names
	lost   chan struct{}  // embedded server: the connection was lost (buffer 1)
	quit   chan struct{}  // closed by Close: keepEmbedded returns
	wg     sync.WaitGroup // keepEmbedded
	closed sync.Once
	NC     *nats.Conn
	JS     jetstream.JetStream
	Stream jetstream.Stream
	log    *slog.Logger
	// localDomain names this server's JetStream on a mirror (its domain,
	// else "mirror"), to keep dead-letter subjects region-local.
	localDomain string
	// token is the embedded server's client token (empty for an external
	// server).
	token string
	// unavailable is set while retried JetStream calls wait (Available).
	unavailable atomic.Bool
	// refused is the connection's last permission violation (DeniedError).
	refused refusals
}

// Open connects (starting the embedded server if cfg.URL is empty) and
// creates or updates the event and dead-letter streams.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Bus, error) {
	cfg.defaults()
	b := &Bus{cfg: cfg, log: log, quit: make(chan struct{})}
	url := cfg.URL
	extra, err := cfg.authOptions()
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Auth.looseSecrets() {
		log.Warn(w)
	}
	connOpts := []nats.Option{
		nats.Name("specstar-replicator"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
			if b.lost != nil {
				select {
				case b.lost <- struct{}{}:
				default:
				}
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "url", RedactURL(b.URL())) }),
		nats.ErrorHandler(b.refused.handler(log)),
	}
	var nc *nats.Conn
	if url == "" {
		if nc, err = b.openEmbedded(ctx, extra, connOpts); err != nil {
			return nil, err
		}
	} else {
		if err := CheckURL(url); err != nil {
			return nil, err
		}
		if nc, err = b.connect(ctx, url, append(extra, connOpts...)...); err != nil {
			return nil, connectError(url, cfg.Auth, err)
		}
	}
	b.NC = nc
	if b.lost != nil {
		b.wg.Add(1)
		go b.keepEmbedded()
	}
	if b.JS, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16)); err != nil {
		b.Close()
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	if err := b.ensureStreams(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// openEmbedded hosts the data directory's embedded server, or joins the
// process that hosts it, and connects. A join whose connection fails (the
// host was stopping: its last events drained, say) starts over, hosting
// the server if the directory is free by then, until joinWait has passed:
// processes started together must end in one host and the rest joined.
func (b *Bus) openEmbedded(ctx context.Context, extra, connOpts []nats.Option) (*nats.Conn, error) {
	cfg := b.cfg
	deadline := time.Now().Add(joinWait)
	for {
		e, url, token, err := startOrJoinEmbedded(cfg, b.log, deadline)
		if err != nil {
			return nil, err
		}
		tlsConfig, err := embeddedClientTLS(cfg.DataDir)
		if err != nil {
			e.stop()
			return nil, err
		}
		b.emb, b.token = e, token
		b.dialer = &dirDialer{dataDir: cfg.DataDir, net: net.Dialer{Timeout: 2 * time.Second}}
		b.lost = make(chan struct{}, 1)
		opts := append(append([]nats.Option{}, extra...), nats.Token(token), nats.SetCustomDialer(b.dialer))
		if e == nil {
			// A client: the token goes only to a server that proves it
			// holds the data directory's key, never to whoever listens
			// on the port. The host dials the server it runs itself, at
			// the URL it wrote, so it spares itself the encryption.
			opts = append(opts, nats.Secure(tlsConfig))
		}
		nc, err := b.connect(ctx, url, append(opts, connOpts...)...)
		if err == nil {
			return nc, nil
		}
		e.stop()
		// Only a host that went away is worth another try: the URL it
		// published is gone or replaced, or the lock is free. A server
		// still named there that refuses us (not the directory's: it
		// fails the TLS check) is an error now.
		hostLeft := currentURL(cfg.DataDir) != url || lockFree(cfg.DataDir)
		if e != nil || !hostLeft || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, connectError(url, cfg.Auth, err)
		}
		b.log.Info("the embedded NATS server joined went away; starting over", "url", url, "err", err)
		time.Sleep(50 * time.Millisecond)
	}
}

// connect dials url, waiting for the server while it cannot be reached
// when the Config says to (WaitForServer).
func (b *Bus) connect(ctx context.Context, url string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(url, opts...)
	if err == nil || !b.cfg.WaitForServer || !errors.Is(err, nats.ErrNoServers) {
		return nc, err
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 250 * time.Millisecond
	bo.MaxInterval = MaxConnectBackoff
	bo.MaxElapsedTime = 0 // until ctx ends
	for attempt := 1; ; attempt++ {
		wait := bo.NextBackOff()
		b.log.Warn("NATS not reachable; waiting for it", "url", RedactURL(url), "attempt", attempt, "err", redact.Error(err, url), "retry_in", wait.Round(time.Millisecond).String())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-t.C:
		}
		nc, err = nats.Connect(url, opts...)
		if err == nil {
			b.log.Info("NATS reachable", "url", RedactURL(url), "attempts", attempt+1)
			return nc, nil
		}
		if !errors.Is(err, nats.ErrNoServers) {
			return nil, err
		}
	}
}

// Config returns the configuration in force, defaults filled in.
func (b *Bus) Config() Config { return b.cfg }

// Prefix is the event subject prefix.
func (b *Bus) Prefix() string { return b.cfg.SubjectPrefix }

// DLQStream is the dead-letter stream's name.
func (b *Bus) DLQStream() string { return b.cfg.Stream + "_DLQ" }

// DLQSubject is the dead-letter subject of one sink.
func (b *Bus) DLQSubject(sinkName string) string {
	return b.dlqPrefix() + "." + events.SubjectToken(sinkName)
}

// DLQSubjects matches every sink's dead-letter subject.
func (b *Bus) DLQSubjects() string { return b.dlqPrefix() + ".>" }

// dlqPrefix starts dead-letter subjects: <prefix>_dlq, or on a mirror
// <prefix>_dlq_<local JetStream domain>. Regions joined by a leaf node
// share subject interest, so with the same subjects each region's
// dead-letter stream would also store the other's dead letters.
func (b *Bus) dlqPrefix() string {
	if b.cfg.MirrorOf == "" {
		return b.cfg.SubjectPrefix + "_dlq"
	}
	return b.cfg.SubjectPrefix + "_dlq_" + events.SubjectToken(b.localDomain)
}

// BlobBucket is the object store bucket that holds blobs too large for
// one message. On a mirror it is the upstream's bucket name (MirrorOf_BLOBS),
// mirrored locally under that name, since that is the bucket the events'
// BlobRefRecords name.
func (b *Bus) BlobBucket() string {
	if b.cfg.MirrorOf != "" {
		return b.cfg.MirrorOf + "_BLOBS"
	}
	return b.cfg.Stream + "_BLOBS"
}

// IsMirror tells whether the event stream mirrors an upstream stream
// (and so takes no publishes).
func (b *Bus) IsMirror() bool { return b.cfg.MirrorOf != "" }

// external is where the upstream of a mirror lives: nil for this domain.
func (c *Config) external() *jetstream.ExternalStream {
	switch {
	case c.MirrorAPIPrefix != "":
		return &jetstream.ExternalStream{APIPrefix: c.MirrorAPIPrefix}
	case c.MirrorDomain != "":
		return &jetstream.ExternalStream{APIPrefix: "$JS." + c.MirrorDomain + ".API"}
	}
	return nil
}

// OriginLastSeq asks a mirror's origin (through the mirror's domain or
// API prefix) for its last sequence, which the mirror will hold once it
// has caught up: mirrors keep the origin's sequence numbers. It is an
// error on a stream that is no mirror, or when the origin cannot be
// reached.
func (b *Bus) OriginLastSeq(ctx context.Context) (uint64, error) {
	if b.cfg.MirrorOf == "" {
		return 0, fmt.Errorf("stream %s is no mirror", b.cfg.Stream)
	}
	js := b.JS
	if ext := b.cfg.external(); ext != nil {
		var err error
		if js, err = jetstream.NewWithAPIPrefix(b.NC, ext.APIPrefix); err != nil {
			return 0, fmt.Errorf("origin stream %s: %w", b.cfg.MirrorOf, err)
		}
	}
	st, err := js.Stream(ctx, b.cfg.MirrorOf)
	if err != nil {
		return 0, fmt.Errorf("origin stream %s: %w", b.cfg.MirrorOf, err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// objStream is the name of an object store bucket's backing stream.
func objStream(bucket string) string { return "OBJ_" + bucket }

func retention(s string) (jetstream.RetentionPolicy, error) {
	switch s {
	case "", "limits":
		return jetstream.LimitsPolicy, nil
	case "interest":
		return jetstream.InterestPolicy, nil
	case "workqueue":
		return jetstream.WorkQueuePolicy, nil
	}
	return 0, fmt.Errorf("unknown retention %q (want limits, interest or workqueue)", s)
}

// streamConfig is the event stream as the Config describes it.
func (b *Bus) streamConfig() (jetstream.StreamConfig, error) {
	ret, err := retention(b.cfg.Retention)
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	maxBytes := b.cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	storage := jetstream.FileStorage
	if b.cfg.InMemory {
		storage = jetstream.MemoryStorage
	}
	scfg := jetstream.StreamConfig{
		Name:        b.cfg.Stream,
		Description: "SpecStar DumpRecord events",
		Subjects:    []string{b.cfg.SubjectPrefix + ".>"},
		Storage:     storage,
		Replicas:    b.cfg.Replicas,
		Retention:   ret,
		MaxAge:      b.cfg.MaxAge,
		MaxBytes:    maxBytes,
		Duplicates:  b.cfg.DuplicateWindow,
	}
	if b.cfg.MirrorOf != "" {
		// A mirror has no subjects and no duplicate window of its own: it
		// copies the upstream's messages with their sequence numbers, and
		// the upstream already dropped duplicates.
		scfg.Description = "SpecStar DumpRecord events, mirrored from " + b.cfg.MirrorOf
		scfg.Subjects = nil
		scfg.Duplicates = 0
		scfg.Mirror = &jetstream.StreamSource{Name: b.cfg.MirrorOf, External: b.cfg.external()}
	}
	return scfg, nil
}

func (b *Bus) ensureStreams(ctx context.Context) error {
	scfg, err := b.streamConfig()
	if err != nil {
		return err
	}
	if _, err := b.openOrCreate(ctx, scfg); err != nil {
		return err
	}
	if b.cfg.MirrorOf != "" { // given, or adopted from the stream
		ai, err := Call(ctx, b, "JetStream account info", b.JS.AccountInfo)
		if err != nil {
			return fmt.Errorf("stream %s: JetStream account info: %w", b.cfg.Stream, err)
		}
		b.localDomain = "mirror"
		if ai.Domain != "" {
			b.localDomain = ai.Domain
		}
		if !b.cfg.ReadOnly {
			if err := b.ensureBlobMirror(ctx); err != nil {
				return err
			}
		}
	}
	if b.cfg.ReadOnly {
		return nil // the dead-letter stream may be missing: then it holds none
	}
	return b.EnsureDLQ(ctx)
}

// EnsureDLQ creates the dead-letter stream if it is missing, so that a
// bus opened ReadOnly (which creates nothing, not even the event stream
// it needs to exist) can still run a worker that may dead-letter events:
// a point-in-time restore.
func (b *Bus) EnsureDLQ(ctx context.Context) error {
	if _, err := b.stream(ctx, b.DLQStream()); errors.Is(err, jetstream.ErrStreamNotFound) {
		dcfg := jetstream.StreamConfig{
			Name:        b.DLQStream(),
			Description: "SpecStar events a sink could not apply, with the reason",
			Subjects:    []string{b.DLQSubjects()},
			Storage:     jetstream.FileStorage,
			Replicas:    b.cfg.Replicas,
			MaxBytes:    -1,
		}
		if _, err := b.createStream(ctx, dcfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("stream %s: %w", dcfg.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("stream %s: %w", b.DLQStream(), err)
	}
	return nil
}

// openOrCreate opens the event stream as it is, or creates it from want
// when it is missing (never in ReadOnly mode). An existing stream is not
// changed: a setting in cfg.Given that differs from it is an error, and
// the settings not given are adopted from it.
func (b *Bus) openOrCreate(ctx context.Context, want jetstream.StreamConfig) (created bool, err error) {
	st, err := b.stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if b.cfg.ReadOnly {
			return false, b.noStream(ctx, want.Name)
		}
		if b.Stream, err = b.createStream(ctx, want); errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return b.openOrCreate(ctx, want) // another process was quicker
		} else if err != nil {
			return false, fmt.Errorf("stream %s: create: %w", want.Name, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("stream %s: %w", want.Name, err)
	}
	have := st.CachedInfo().Config
	if err := b.adopt(want, have); err != nil {
		return false, err
	}
	b.Stream = st
	return false, nil
}

// adopt checks the given settings of want against the existing stream's
// (have) and takes the others from it, so a command run without the
// stream flags works on a stream made with other ones.
func (b *Bus) adopt(want, have jetstream.StreamConfig) error {
	haveMirror := ""
	if have.Mirror != nil {
		haveMirror = have.Mirror.Name
	}
	havePrefix := ""
	if len(have.Subjects) == 1 && strings.HasSuffix(have.Subjects[0], ".>") {
		havePrefix = strings.TrimSuffix(have.Subjects[0], ".>")
	}
	maxBytes := func(n int64) string {
		if n <= 0 {
			return "unlimited"
		}
		return strconv.FormatInt(n, 10)
	}
	type setting struct {
		name       string
		have, want string
		adopt      func()
	}
	for _, s := range []setting{
		{"subject-prefix", havePrefix, b.cfg.SubjectPrefix, func() {
			if havePrefix != "" {
				b.cfg.SubjectPrefix = havePrefix
			}
		}},
		{"replicas", strconv.Itoa(have.Replicas), strconv.Itoa(want.Replicas), func() { b.cfg.Replicas = have.Replicas }},
		{"max-age", have.MaxAge.String(), want.MaxAge.String(), func() { b.cfg.MaxAge = have.MaxAge }},
		{"max-bytes", maxBytes(have.MaxBytes), maxBytes(want.MaxBytes), func() { b.cfg.MaxBytes = max(have.MaxBytes, 0) }},
		{"retention", retentionName(have.Retention), retentionName(want.Retention), func() { b.cfg.Retention = retentionName(have.Retention) }},
		{"duplicate-window", have.Duplicates.String(), want.Duplicates.String(), func() { b.cfg.DuplicateWindow = have.Duplicates }},
		{"mirror-of", haveMirror, b.cfg.MirrorOf, func() { b.cfg.MirrorOf = haveMirror }},
	} {
		if !b.cfg.Given[s.name] {
			s.adopt()
			continue
		}
		if s.have != s.want && !(s.name == "duplicate-window" && haveMirror != "") {
			return fmt.Errorf("stream %s has %s %s, but --%s says %s: an existing stream is not changed implicitly (change it with `replicator stream apply`, or leave the flag out)",
				have.Name, s.name, s.have, s.name, s.want)
		}
	}
	return nil
}

// noStream is the error for a missing stream, listing those there are.
func (b *Bus) noStream(ctx context.Context, name string) error {
	var names []string
	lister := b.JS.StreamNames(ctx)
	for n := range lister.Name() {
		names = append(names, n)
	}
	if len(names) == 0 {
		return &noStreamError{fmt.Sprintf("no stream %s; this server has no streams yet (a writer or `replicator run` creates it)", name)}
	}
	return &noStreamError{fmt.Sprintf("no stream %s; streams here: %s", name, strings.Join(names, ", "))}
}

// noStreamError is a missing stream: the server was reached. It is
// jetstream.ErrStreamNotFound to errors.Is.
type noStreamError struct{ msg string }

func (e *noStreamError) Error() string { return e.msg }
func (e *noStreamError) Unwrap() error { return jetstream.ErrStreamNotFound }

// Apply changes the settings that change.Given names to change's values
// (creating the event stream if it is missing) and keeps the others as
// the stream has them: the one explicit way to change an existing stream
// (`replicator stream apply`). It returns the stream's new settings.
func (b *Bus) Apply(ctx context.Context, change Config) (jetstream.StreamConfig, error) {
	c := change.Given
	if c["subject-prefix"] {
		b.cfg.SubjectPrefix = change.SubjectPrefix
	}
	if c["replicas"] {
		b.cfg.Replicas = change.Replicas
	}
	if c["max-age"] {
		b.cfg.MaxAge = change.MaxAge
	}
	if c["max-bytes"] {
		b.cfg.MaxBytes = change.MaxBytes
	}
	if c["retention"] {
		b.cfg.Retention = change.Retention
	}
	if c["duplicate-window"] {
		b.cfg.DuplicateWindow = change.DuplicateWindow
	}
	if c["mirror-of"] {
		b.cfg.MirrorOf = change.MirrorOf
	}
	want, err := b.streamConfig()
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	st, err := Call(ctx, b, "stream "+want.Name+" create or update", func(ctx context.Context) (jetstream.Stream, error) {
		return b.JS.CreateOrUpdateStream(ctx, want)
	})
	if err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("stream %s: %w", want.Name, explainConfigError(err, want))
	}
	b.Stream = st
	return st.CachedInfo().Config, nil
}

func retentionName(r jetstream.RetentionPolicy) string {
	switch r {
	case jetstream.InterestPolicy:
		return "interest"
	case jetstream.WorkQueuePolicy:
		return "workqueue"
	}
	return "limits"
}

// ensureBlobMirror creates the local copy of the upstream's blob object
// store: a stream named like the bucket's backing stream, OBJ_<bucket>,
// that mirrors the upstream's. Objects keep their subjects
// ($O.<bucket>.C.<nuid> chunks, $O.<bucket>.M.<name> metas), so the
// ordinary object store API reads it as the bucket <bucket>.
func (b *Bus) ensureBlobMirror(ctx context.Context) error {
	name := objStream(b.BlobBucket())
	ocfg := jetstream.StreamConfig{
		Name:        name,
		Description: "SpecStar blobs too large for one message, mirrored from " + name,
		Storage:     jetstream.FileStorage,
		Replicas:    b.cfg.Replicas,
		MaxBytes:    -1,
		Discard:     jetstream.DiscardNew,
		AllowRollup: true, // object metas are rolled up on their subject
		AllowDirect: true,
		Mirror:      &jetstream.StreamSource{Name: name, External: b.cfg.external()},
	}
	// A copy that is already there as wanted is left alone: a replicator,
	// whose NATS user may not change streams, opens the bus this way too.
	if st, err := b.stream(ctx, name); err == nil && sameMirror(st.CachedInfo().Config.Mirror, ocfg.Mirror) {
		return nil
	} else if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s (mirror of blob bucket %s): %w", name, b.BlobBucket(), err)
	}
	if _, err := Call(ctx, b, "stream "+name+" create or update", func(ctx context.Context) (jetstream.Stream, error) {
		return b.JS.CreateOrUpdateStream(ctx, ocfg)
	}); err != nil {
		return fmt.Errorf("stream %s (mirror of blob bucket %s): %w", name, b.BlobBucket(), err)
	}
	return nil
}

// sameMirror reports whether a stream's mirror source is want's: the same
// stream through the same API prefix.
func sameMirror(have, want *jetstream.StreamSource) bool {
	if have == nil || want == nil {
		return have == want
	}
	if have.Name != want.Name || (have.External == nil) != (want.External == nil) {
		return false
	}
	return have.External == nil || have.External.APIPrefix == want.External.APIPrefix
}

// Blobs returns the blob object store, creating it if needed.
func (b *Bus) Blobs(ctx context.Context) (jetstream.ObjectStore, error) {
	obj, err := Call(ctx, b, "object store "+b.BlobBucket(), func(ctx context.Context) (jetstream.ObjectStore, error) {
		return b.JS.ObjectStore(ctx, b.BlobBucket())
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obj, err = Call(ctx, b, "object store "+b.BlobBucket()+" create", func(ctx context.Context) (jetstream.ObjectStore, error) {
			return b.JS.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
				Bucket:      b.BlobBucket(),
				Description: "SpecStar blobs too large for one message, by file_id",
				Storage:     jetstream.FileStorage,
				Replicas:    b.cfg.Replicas,
			})
		})
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", b.BlobBucket(), err)
	}
	return obj, nil
}

// MaxPayload is the largest message the server accepts.
func (b *Bus) MaxPayload() int64 { return b.NC.MaxPayload() }

// Close drains the connection and stops the embedded server if this
// process runs it (the other processes sharing its data directory then
// take it over: see keepEmbedded).
func (b *Bus) Close() {
	b.closed.Do(func() { close(b.quit) })
	b.wg.Wait()
	if b.NC != nil {
		_ = b.NC.Drain()
		for i := 0; i < 100 && b.NC.IsDraining(); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		b.NC.Close()
	}
	b.embMu.Lock()
	defer b.embMu.Unlock()
	b.emb.stop()
	b.emb = nil
}

// Connected reports whether the bus is connected to its server now (false
// while it reconnects), for readiness probes.
func (b *Bus) Connected() bool { return b.NC != nil && b.NC.IsConnected() }

// hostsEmbedded reports whether this process runs the embedded server.
func (b *Bus) hostsEmbedded() bool {
	b.embMu.Lock()
	defer b.embMu.Unlock()
	return b.emb != nil
}

// keepEmbedded keeps a Bus of an embedded server connected when the
// process hosting the server leaves (or dies): every time the connection
// is lost, until it is back, it tries to take the data directory's lock
// and host the server itself, on the same directory and, if it can bind
// it, the same port. Whichever process wins records the server's URL in
// the directory, and every client's dialer (dirDialer) dials the URL the
// directory names, so nats.go's own reconnect loop reaches the new server
// whoever started it and on whatever port.
func (b *Bus) keepEmbedded() {
	defer b.wg.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-b.lost:
		}
		for !b.NC.IsConnected() && !b.NC.IsClosed() && !b.hostsEmbedded() {
			e, err := tryHostEmbedded(b.cfg, b.dialer.port())
			if err != nil {
				b.log.Warn("cannot take over the embedded NATS server", "data_dir", b.cfg.DataDir, "err", err)
			}
			if e != nil {
				b.embMu.Lock()
				b.emb = e
				b.embMu.Unlock()
				b.log.Info("took over the embedded NATS server its host left", "url", e.url, "data_dir", b.cfg.DataDir)
				break
			}
			select {
			case <-b.quit:
				return
			case <-tick.C:
			}
		}
	}
}

// URL is the server URL this bus is connected to, with its credentials:
// for an embedded server, what another process of the same user can use
// as --nats (the token in the URL). Log RedactURL(URL()), never URL().
func (b *Bus) URL() string {
	u := b.NC.ConnectedUrl()
	if b.dialer != nil && b.dialer.lastAddr() != "" {
		u = "nats://" + b.dialer.lastAddr() // where the dialer really went
	}
	if b.token == "" {
		return u
	}
	parsed, err := neturl.Parse(u)
	if err != nil {
		return u
	}
	parsed.User = neturl.User(b.token)
	return parsed.String()
}

// CheckURL refuses a --nats URL that nats.go would not speak NATS to
// (http://, https://, a typo'd scheme) or that would make it dial its
// default server (an empty address, no host); several comma-separated
// URLs of a cluster are checked one by one.
func CheckURL(raw string) error {
	for _, one := range strings.Split(raw, ",") {
		one = strings.TrimSpace(one)
		if one == "" {
			// nats.go would dial its default, 127.0.0.1:4222: whatever
			// server listens there, not the one meant.
			return fmt.Errorf("--nats %q: an empty server address (only spaces, or nothing between commas): give host:port or nats://host:port, or no --nats for the embedded server", raw)
		}
		scheme, _, ok := strings.Cut(one, "://")
		if !ok {
			one = "nats://" + one // host:port, which nats.go reads as nats://host:port
		}
		u, err := neturl.Parse(one)
		if err != nil {
			return fmt.Errorf("--nats %s: not a valid URL: %w", RedactURL(one), redact.Error(err, one))
		}
		if u.Hostname() == "" {
			return fmt.Errorf("--nats %s: no host (nats.go would dial 127.0.0.1): give host:port", RedactURL(one))
		}
		if !ok {
			continue
		}
		switch strings.ToLower(scheme) {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("--nats %s: %s:// is not a NATS URL (want nats://, tls://, ws:// or wss://)", RedactURL(one), scheme)
		}
	}
	return nil
}

// RedactURL hides the credentials of a NATS URL (user, password or
// token) for logs and messages.
func RedactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, one := range parts {
		u, err := neturl.Parse(strings.TrimSpace(one))
		if err != nil || u.Host == "" {
			if strings.Contains(one, "@") {
				parts[i] = "(unparseable NATS URL)"
			}
			continue
		}
		if u.User != nil {
			u.User = neturl.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// Positions is the key-value bucket where publishers keep how far they
// have published (a snapshot's progress, a tail's cursor), so a restart
// neither loses nor re-sends more than the unacknowledged tail.
func (b *Bus) Positions(ctx context.Context) (jetstream.KeyValue, error) {
	name := b.cfg.Stream + "_POSITIONS"
	kv, err := Call(ctx, b, "key-value bucket "+name, func(ctx context.Context) (jetstream.KeyValue, error) {
		return b.JS.KeyValue(ctx, name)
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = Call(ctx, b, "key-value bucket "+name+" create", func(ctx context.Context) (jetstream.KeyValue, error) {
			return b.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket:      name,
				Description: "publisher positions (snapshot progress, tail cursors)",
				Storage:     jetstream.FileStorage,
				Replicas:    b.cfg.Replicas,
				History:     1,
			})
		})
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", name, err)
	}
	return kv, nil
}
