package source

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/scheme"
	redissink "github.com/specstar/replicator/sink/redis"
	"github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/source/disk"
	"github.com/specstar/replicator/source/postgres"
	"github.com/specstar/replicator/source/redis"
	"github.com/specstar/replicator/source/s3"
)

// Spec names a source and what Open needs to read it; it exists so that a
// command's flags (or a deployment of a configuration file) become a
// source in one call.
type Spec struct {
	// From is the source: an .acbak archive (a path, or a file:// URL),
	// a SpecStar disk tree (a directory, or disk:/path), a deployment's
	// Postgres meta store (postgres://...), its Redis meta store
	// (redis://..., with slow= for a fast/slow one), an S3 resource store
	// (s3://...) or SpecStar's all-S3 factory (s3://...?factory=s3).
	From string
	// Name names the source in errors ("" = From, password hidden).
	Name string
	// Resources is the resource store when not in From: for a postgres://
	// From, From itself (revisions read from Postgres), another Postgres
	// (not read), an s3:// URL, or "" (From's revisions= option decides);
	// for a redis:// From, a disk tree or an s3:// URL.
	Resources string
	// Blobs is the blob store: for a postgres:// From, its presence makes
	// the source yield a BlobRefRecord per blob a payload references; for
	// an s3:// From, the s3:// blob store listed.
	Blobs string
	// Archive are the reader options of an archive (Size is set from the
	// file).
	Archive acbak.Options
	// Progress (may be nil) is called, while reading an archive, with the
	// frames and bytes read so far.
	Progress func(frames int, offset int64)
}

// opener opens one kind of source from a Spec.
type opener func(Spec) (Source, error)

// backend is the fixed table of source kinds by URL scheme: the one place
// that knows which package reads which URL.
func backend(scheme string) (opener, bool) {
	switch scheme {
	case "file":
		return openArchive, true
	case "disk":
		return openDisk, true
	case "postgres", "postgresql":
		return openPostgres, true
	case "s3":
		return openS3, true
	case "redis", "rediss":
		return openRedis, true
	}
	return nil, false
}

// Schemes are the URL schemes a source can be given with; anything else
// before a colon is refused rather than taken as a relative path.
func Schemes() []string {
	return []string{"file", "disk", "postgres", "postgresql", "s3", "redis", "rediss"}
}

// Scheme is the kind of URL a source is given as: its scheme, or "file"
// for a plain path.
func Scheme(raw string) string {
	if strings.HasPrefix(raw, "disk:") {
		return "disk"
	}
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return "file"
	}
	return strings.ToLower(scheme)
}

// Open returns the source spec names, by the scheme of spec.From. It only
// checks the spec: files and connections are opened by Records, for the
// length of one iteration.
func Open(spec Spec) (Source, error) {
	if spec.From == "" {
		return nil, errors.New("source: no source given")
	}
	if spec.Name == "" {
		spec.Name = Redact(spec.From)
	}
	if err := scheme.Check("source", spec.From, Schemes()...); err != nil {
		return nil, err
	}
	kind := Scheme(spec.From)
	if st, err := os.Stat(strings.TrimPrefix(spec.From, "file://")); kind == "file" && err == nil && st.IsDir() {
		kind = "disk" // a directory is a disk tree
	}
	open, ok := backend(kind)
	if !ok {
		return nil, fmt.Errorf("source %s: unknown kind of source %q (want an archive path, a disk directory, or one of the schemes %s)", spec.Name, kind, strings.Join(Schemes(), ", "))
	}
	return open(spec)
}

func openDisk(spec Spec) (Source, error) {
	if spec.Resources != "" && spec.Resources != spec.From {
		return nil, fmt.Errorf("source %s: a disk tree holds its own revisions; resources %s is not read", spec.Name, Redact(spec.Resources))
	}
	return &disk.Source{URL: strings.TrimPrefix(spec.From, "file://")}, nil
}

// S3Factory reports whether an s3:// URL names SpecStar's all-S3 factory
// (factory=s3), a source with metas and no live tail, read like a disk
// tree.
func S3Factory(raw string) bool { return Scheme(raw) == "s3" && s3.IsFactoryURL(raw) }

// PostgresRevisions reports whether a postgres:// URL's own tables hold
// revisions (its revisions= option, true by default).
func PostgresRevisions(raw string) bool {
	_, opts, err := postgres.ParseURL(raw)
	return err != nil || opts.Revisions
}

// PostgresStores returns the blob and resource stores a postgres:// URL
// names in its blobs= and resources= options ("" when absent or when the
// URL does not parse).
func PostgresStores(raw string) (blobs, resources string) {
	_, opts, err := postgres.ParseURL(raw)
	if err != nil {
		return "", ""
	}
	return opts.Blobs, opts.Resources
}

func openArchive(spec Spec) (Source, error) {
	return &archive.Source{Path: strings.TrimPrefix(spec.From, "file://"), Options: spec.Archive, Progress: spec.Progress}, nil
}

func openPostgres(spec Spec) (Source, error) {
	if _, _, err := postgres.ParseURL(spec.From); err != nil {
		return nil, err
	}
	return &postgres.DeploymentSource{Name: spec.Name, Meta: spec.From, Resources: spec.Resources, BlobRefs: spec.Blobs != ""}, nil
}

func openS3(spec Spec) (Source, error) {
	if spec.Resources != "" && spec.Resources != spec.From {
		return nil, fmt.Errorf("source %s: an S3 resource store is the source itself; resources %s is not read", spec.Name, Redact(spec.Resources))
	}
	if s3.IsFactoryURL(spec.From) {
		if spec.Blobs != "" && spec.Blobs != spec.From {
			return nil, fmt.Errorf("source %s: an all-S3 factory holds its own blobs; blobs %s is not read", spec.Name, Redact(spec.Blobs))
		}
		return &s3.Factory{URL: spec.From}, nil
	}
	return &s3.Source{Resources: spec.From, Blobs: spec.Blobs}, nil
}

func openRedis(spec Spec) (Source, error) {
	fast, _, err := redis.ParseURL(spec.From)
	if err == nil {
		_, err = redissink.ParseSpec(fast)
	}
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", spec.Name, err)
	}
	return &redis.Source{Name: spec.Name, Meta: spec.From, Resources: strings.TrimPrefix(spec.Resources, "file://")}, nil
}
