package sink

import (
	"context"
	"fmt"
	"strings"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/redact"
	"github.com/specstar/replicator/internal/scheme"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/layered"
	"github.com/specstar/replicator/sink/postgres"
	"github.com/specstar/replicator/sink/redis"
	"github.com/specstar/replicator/sink/s3"
)

// backendSpec is what every backend's ParseSpec returns.
type backendSpec interface {
	Consumer() (name string, models []string)
	Holds() (revisions, blobs bool)
}

// backend is one row of the scheme table.
type backend struct {
	kind     string
	prefixes []string            // URL prefixes it serves; none: a plain path
	display  func(string) string // the URL for messages and logs
	parse    func(string) (backendSpec, error)
	open     func(context.Context, backendSpec) (Sink, error)
	// openRead opens for reading back only, changing nothing in the store;
	// nil: the backend's open changes nothing anyway.
	openRead func(context.Context, backendSpec) (Sink, error)
}

// backends is the scheme table: adding a backend is one package and one
// row here. The last row (no prefixes) serves plain paths.
func backends() []backend {
	return []backend{
		{"postgres", []string{"postgres://", "postgresql://"}, redact.URL, parseWith(postgres.ParseSpec), openWith((*postgres.Spec).Open), openWith((*postgres.Spec).OpenReader)},
		{"s3", []string{"s3://"}, redact.URL, parseWith(s3.ParseSpec), openS3, nil},
		{"redis", []string{"redis://", "rediss://"}, redact.URL, parseWith(redis.ParseSpec), openWith((*redis.Spec).Open), nil},
		{"disk", []string{"disk:"}, same, parseWith(disk.ParseSpec), openWith((*disk.Spec).Open), openWith((*disk.Spec).OpenReadOnly)},
	}
}

func same(raw string) string { return raw }

// openS3 opens an s3:// sink: SpecStar's all-S3 factory (metas included)
// when the URL says factory=s3, else a resource and blob store.
func openS3(ctx context.Context, bs backendSpec) (Sink, error) {
	s := bs.(*s3.Spec)
	if s.IsFactory() {
		f, err := s.OpenFactory(ctx)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	snk, err := s.Open(ctx)
	if err != nil {
		return nil, err
	}
	return snk, nil
}

// parseWith adapts a backend's ParseSpec to the table.
func parseWith[T backendSpec](parse func(string) (T, error)) func(string) (backendSpec, error) {
	return func(raw string) (backendSpec, error) {
		s, err := parse(raw)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// openWith adapts a backend's Spec.Open to the table.
func openWith[T backendSpec, S Sink](open func(T, context.Context) (S, error)) func(context.Context, backendSpec) (Sink, error) {
	return func(ctx context.Context, s backendSpec) (Sink, error) {
		snk, err := open(s.(T), ctx)
		if err != nil {
			return nil, err
		}
		return snk, nil
	}
}

// Spec is one sink, parsed: what to open, and what the replicator needs
// besides (the durable consumer's name, the models= filter, the URL to
// show).
type Spec struct {
	// Raw is the sink for messages and logs: its URL with any password
	// hidden, or the deployment.
	Raw string
	// Kind is "disk", "postgres", "s3", "redis" or "deployment".
	Kind string
	// Name is the durable consumer name, stable for one destination.
	Name string
	// Models are the models= filter; empty means every model.
	Models []string

	be     *backend
	spec   backendSpec
	layers *layers // Kind "deployment"
}

// Schemes are the URL schemes a sink can be given with; anything else
// before a colon is refused rather than taken as a relative path.
func Schemes() []string { return []string{"disk", "postgres", "postgresql", "s3", "redis", "rediss"} }

// Parse reads a sink URL: "disk:/path" or a plain path (see disk.ParseSpec),
// postgres:// (see postgres.ParseSpec), s3:// (see s3.ParseSpec) or
// redis:// (a Redis meta store, see redis.ParseSpec).
func Parse(raw string) (*Spec, error) {
	bes := backends()
	be := &bes[len(bes)-1] // a plain path
	for i := range bes {
		for _, p := range bes[i].prefixes {
			if strings.HasPrefix(raw, p) {
				be = &bes[i]
			}
		}
	}
	if be.kind == "disk" && !strings.HasPrefix(raw, "disk:") {
		if err := scheme.Check("sink", raw, Schemes()...); err != nil {
			return nil, err
		}
	}
	s := &Spec{Raw: be.display(raw), Kind: be.kind, be: be}
	bs, err := be.parse(raw)
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", s.Raw, err)
	}
	s.spec = bs
	s.Name, s.Models = bs.Consumer()
	return s, s.checkName()
}

// checkName refuses a consumer name NATS would read as a subject pattern.
func (s *Spec) checkName() error {
	if strings.ContainsAny(s.Name, ".*> \t") {
		return fmt.Errorf("sink %q: name %q may not contain '.', '*', '>' or spaces", s.Raw, s.Name)
	}
	return nil
}

// Open opens the sink the Spec names.
func (s *Spec) Open(ctx context.Context) (Sink, error) { return s.open(ctx, false) }

// OpenReader opens the sink the Spec names to read it back (verify,
// reconcile): nothing in the store is created or changed by the opening (a
// disk sink does not sweep its writers' staging directories), and a disk
// sink refuses every Apply.
func (s *Spec) OpenReader(ctx context.Context) (Sink, error) { return s.open(ctx, true) }

func (s *Spec) open(ctx context.Context, readOnly bool) (Sink, error) {
	if s.layers != nil {
		return s.layers.open(ctx, s.Raw, readOnly)
	}
	open := s.be.open
	if readOnly && s.be.openRead != nil {
		open = s.be.openRead
	}
	snk, err := open(ctx, s.spec)
	if err != nil {
		return nil, fmt.Errorf("open sink %s: %w", s.Raw, err)
	}
	return snk, nil
}

// Open parses a sink URL and opens it, for callers that need nothing but
// the Sink.
func Open(ctx context.Context, raw string) (Sink, error) {
	s, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	return s.Open(ctx)
}

// DiskRoot is the root directory of a plain disk sink, "" for any other.
func (s *Spec) DiskRoot() string {
	if d := s.plainDisk(); d != nil {
		return d.Root
	}
	return ""
}

// SyncPerBatchUnlessSet makes a plain disk sink whose URL does not say
// sync= make each batch durable with one syncfs before its ack
// (sync=batch): mirror's and run's default. What a power loss tears is
// in a batch not yet acked, so its events are delivered again (run's
// durable consumer) or the job is run again (mirror's private stream)
// and the files are rewritten; per-file fsyncs would promise nothing
// more at several times the cost.
func (s *Spec) SyncPerBatchUnlessSet() {
	if d := s.plainDisk(); d != nil && !d.SyncSet {
		d.Options.SyncPerBatch = true
	}
}

// Sync is a plain disk sink's durability, "file" or "batch" (see the disk
// URL's sync=); "" for any other sink.
func (s *Spec) Sync() string {
	switch d := s.plainDisk(); {
	case d == nil:
		return ""
	case d.Options.SyncPerBatch:
		return "batch"
	}
	return "file"
}

// plainDisk is the disk backend's spec of a sink that is one disk
// deployment, nil for any other (a layered deployment included).
func (s *Spec) plainDisk() *disk.Spec {
	if d, ok := s.spec.(*disk.Spec); ok && s.layers == nil {
		return d
	}
	return nil
}

// Where names the sink's destination for people: a disk sink's root, else
// Raw.
func (s *Spec) Where() string {
	if r := s.DiskRoot(); r != "" {
		return r
	}
	return s.Raw
}

// Filters are the subject filters of the sink's consumer below prefix:
// every model, or those of Models.
func (s *Spec) Filters(prefix string) []string {
	if len(s.Models) == 0 {
		return []string{prefix + ".>"}
	}
	out := make([]string, 0, len(s.Models))
	for _, m := range s.Models {
		out = append(out, prefix+"."+events.SubjectToken(m)+".>")
	}
	return out
}

// Holds says which kinds of record the sink keeps beside metas, so verify
// does not look for what it never writes.
func (s *Spec) Holds() (revisions, blobs bool) {
	if s.layers != nil {
		return s.layers.resources != nil, s.layers.blobs != nil
	}
	return s.spec.Holds()
}

var (
	_ Sink   = (*layered.Sink)(nil)
	_ Reader = (*redis.Sink)(nil)
	_ Lister = (*redis.Sink)(nil)
)
