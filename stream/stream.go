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
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
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
	// DuplicateWindow is how long JetStream remembers message ids to drop
	// re-published records (default 1h).
	DuplicateWindow time.Duration
	// MaxPayload of the embedded server (default 1 MiB, as nats-server's).
	MaxPayload int32
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
}

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
	cfg    Config
	emb    *embedded
	NC     *nats.Conn
	JS     jetstream.JetStream
	Stream jetstream.Stream
	log    *slog.Logger
	// localDomain names this server's JetStream on a mirror (its domain,
	// else "mirror"), to keep dead-letter subjects region-local.
	localDomain string
}

// Open connects (starting the embedded server if cfg.URL is empty) and
// creates or updates the event and dead-letter streams.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Bus, error) {
	cfg.defaults()
	b := &Bus{cfg: cfg, log: log}
	url := cfg.URL
	if url == "" {
		e, u, err := startOrJoinEmbedded(cfg.DataDir, cfg.MaxPayload, cfg.Domain, log)
		if err != nil {
			return nil, err
		}
		b.emb, url = e, u
	}
	nc, err := nats.Connect(url,
		nats.Name("specstar-replicator"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "url", nc.ConnectedUrl()) }),
	)
	if err != nil {
		b.emb.stop()
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	b.NC = nc
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

func (b *Bus) ensureStreams(ctx context.Context) error {
	ret, err := retention(b.cfg.Retention)
	if err != nil {
		return err
	}
	maxBytes := b.cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	scfg := jetstream.StreamConfig{
		Name:        b.cfg.Stream,
		Description: "SpecStar DumpRecord events",
		Subjects:    []string{b.cfg.SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Replicas:    b.cfg.Replicas,
		Retention:   ret,
		MaxAge:      b.cfg.MaxAge,
		MaxBytes:    maxBytes,
		Duplicates:  b.cfg.DuplicateWindow,
	}
	if b.cfg.MirrorOf != "" {
		ai, err := b.JS.AccountInfo(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: JetStream account info: %w", b.cfg.Stream, err)
		}
		b.localDomain = "mirror"
		if ai.Domain != "" {
			b.localDomain = ai.Domain
		}
		// A mirror has no subjects and no duplicate window of its own: it
		// copies the upstream's messages with their sequence numbers, and
		// the upstream already dropped duplicates.
		scfg.Description = "SpecStar DumpRecord events, mirrored from " + b.cfg.MirrorOf
		scfg.Subjects = nil
		scfg.Duplicates = 0
		scfg.Mirror = &jetstream.StreamSource{Name: b.cfg.MirrorOf, External: b.cfg.external()}
	}
	if b.Stream, err = b.JS.CreateOrUpdateStream(ctx, scfg); err != nil {
		return fmt.Errorf("stream %s: %w", scfg.Name, err)
	}
	if b.cfg.MirrorOf != "" {
		if err := b.ensureBlobMirror(ctx); err != nil {
			return err
		}
	}
	dcfg := jetstream.StreamConfig{
		Name:        b.DLQStream(),
		Description: "SpecStar events a sink could not apply, with the reason",
		Subjects:    []string{b.DLQSubjects()},
		Storage:     jetstream.FileStorage,
		Replicas:    b.cfg.Replicas,
		MaxBytes:    -1,
	}
	if _, err := b.JS.CreateOrUpdateStream(ctx, dcfg); err != nil {
		return fmt.Errorf("stream %s: %w", dcfg.Name, err)
	}
	return nil
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
	if _, err := b.JS.CreateOrUpdateStream(ctx, ocfg); err != nil {
		return fmt.Errorf("stream %s (mirror of blob bucket %s): %w", name, b.BlobBucket(), err)
	}
	return nil
}

// Blobs returns the blob object store, creating it if needed.
func (b *Bus) Blobs(ctx context.Context) (jetstream.ObjectStore, error) {
	obj, err := b.JS.ObjectStore(ctx, b.BlobBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obj, err = b.JS.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      b.BlobBucket(),
			Description: "SpecStar blobs too large for one message, by file_id",
			Storage:     jetstream.FileStorage,
			Replicas:    b.cfg.Replicas,
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
// process runs it.
func (b *Bus) Close() {
	if b.NC != nil {
		_ = b.NC.Drain()
		for i := 0; i < 100 && b.NC.IsDraining(); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		b.NC.Close()
	}
	b.emb.stop()
}

// URL is the server URL this bus is connected to (for an embedded server,
// what other processes can use as --nats).
func (b *Bus) URL() string { return b.NC.ConnectedUrl() }

// Positions is the key-value bucket where publishers keep how far they
// have published (a snapshot's progress, a tail's cursor), so a restart
// neither loses nor re-sends more than the unacknowledged tail.
func (b *Bus) Positions(ctx context.Context) (jetstream.KeyValue, error) {
	name := b.cfg.Stream + "_POSITIONS"
	kv, err := b.JS.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = b.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: "publisher positions (snapshot progress, tail cursors)",
			Storage:     jetstream.FileStorage,
			Replicas:    b.cfg.Replicas,
			History:     1,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", name, err)
	}
	return kv, nil
}
