package main

// The flags the writer's commands share: what is read (sourceFlags:
// --from, --from-meta/--from-resources/--from-blobs, --config; the old
// --resources and --blobs deprecated) and an archive's reader options.

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/internal/cli"
	specdeploy "github.com/specstar/replicator/internal/deployment"
)

// sourceFlags name what a command reads.
type sourceFlags struct {
	from       string
	layers     specdeploy.Flags // Meta, Resources, Blobs of the source
	configPath string
}

func (s *sourceFlags) register(fs *flag.FlagSet, stderr io.Writer) {
	fs.StringVar(&s.from, "from", "", "what is read: an .acbak archive, disk:/path, postgres://...?table_prefix=&revisions=true&blobs=DIR, s3://..., or a deployment of --config")
	fs.StringVar(&s.layers.Meta, "from-meta", "", "the source's meta store, when given layer by layer: postgres://..., redis://...[&slow=URL] or disk:/path")
	fs.StringVar(&s.layers.Resources, "from-resources", "", "the source's resource store when not in its meta store: s3://bucket[/prefix]?endpoint=&region=&path_style=true "+
		"(prefix defaults to {model}/data/; credentials from the AWS chain)")
	fs.StringVar(&s.layers.Blobs, "from-blobs", "", "the source's blob store: s3://bucket[/prefix]?endpoint=... (prefix defaults to blobs/) or a DiskBlobStore "+
		"directory (default: blobs= of the postgres URL, else the resource store's blob_bucket/blob_prefix)")
	fs.StringVar(&s.configPath, "config", os.Getenv("SPECSTAR_CONFIG"), "YAML file with named deployments and nats settings (default $SPECSTAR_CONFIG); --from may name a deployment")
	cli.Alias(fs, "resources", "from-resources", stderr)
	cli.Alias(fs, "blobs", "from-blobs", stderr)
}

// config loads the --config file (nil without one) and applies its nats
// settings to the flags the command line left unset.
func (s *sourceFlags) config(fs *flag.FlagSet) (*specdeploy.Config, error) {
	if s.configPath == "" {
		return nil, nil
	}
	cfg, err := specdeploy.Load(s.configPath)
	if err != nil {
		return nil, err
	}
	return cfg, cfg.ApplyFlags(fs)
}

// postgres resolves the flags for the commands that follow a live
// Postgres deployment (snapshot, tail): --from (or --from-meta) is its
// meta store, or names a deployment of --config whose stores fill
// --from-resources and --from-blobs.
func (s *sourceFlags) postgres(fs *flag.FlagSet) error {
	if s.from == "" {
		s.from = s.layers.Meta
	}
	cfg, err := s.config(fs)
	if err != nil {
		return err
	}
	d, ok, err := cfg.Lookup(s.from)
	if err != nil || !ok {
		return err
	}
	meta := d.Layer(specdeploy.MetaLayer)
	if specdeploy.Scheme(meta) != "postgres" {
		return fmt.Errorf("deployment %s: only a Postgres meta store can be followed live (its meta store is %s)", d, meta)
	}
	s.from = meta
	if r := d.Layer(specdeploy.ResourcesLayer); r != "" && r != meta && s.layers.Resources == "" {
		s.layers.Resources = r
	}
	if b := d.Layer(specdeploy.BlobsLayer); b != "" && s.layers.Blobs == "" {
		s.layers.Blobs = strings.TrimPrefix(b, "disk:")
	}
	if d.Layer(specdeploy.ResourcesLayer) == "" && s.layers.Resources == "" {
		return fmt.Errorf("deployment %s has no resource store", d)
	}
	return nil
}

// archiveFlags are the options every archive command takes.
type archiveFlags struct {
	from           string
	lenient        bool
	maxFrame       int64
	requireCurrent bool
}

func (a *archiveFlags) register(fs *flag.FlagSet, verify bool) {
	fs.StringVar(&a.from, "from", "", "the .acbak archive to read")
	fs.BoolVar(&a.lenient, "lenient", false, "accept, with a warning, what SpecStar's loader accepts (missing Eof, bytes after it, mismatched ModelEnd)")
	fs.Int64Var(&a.maxFrame, "max-frame", acbak.DefaultMaxFrame, "largest frame to accept, in bytes")
	if verify {
		fs.BoolVar(&a.requireCurrent, "require-current", false, "make a meta whose current revision is missing from the archive an error, not a warning")
	}
}

// path is the archive --from names, or the deprecated positional one;
// ok is false (with the code to exit with) on a usage error.
func (a *archiveFlags) path(c *cli.Command, pos []string, stderr io.Writer) (string, int, bool) {
	if len(pos) == 1 && a.from == "" {
		cli.Deprecated(stderr, c.Name, "the positional ARCHIVE", "--from ARCHIVE")
		return pos[0], exitOK, true
	}
	if len(pos) != 0 || a.from == "" {
		return "", c.Usagef(stderr, "want one archive: --from ARCHIVE"), false
	}
	return a.from, exitOK, true
}

// openArchive opens path and returns reader options carrying its size.
func openArchive(path string, a archiveFlags) (*os.File, acbak.Options, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, acbak.Options{}, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, acbak.Options{}, fmt.Errorf("stat %s: %w", path, err)
	}
	opts := acbak.Options{Lenient: a.lenient, MaxFrame: a.maxFrame, RequireCurrent: a.requireCurrent}
	if st.Mode().IsRegular() {
		opts.Size = st.Size()
	}
	return f, opts, nil
}
