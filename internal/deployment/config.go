package deployment

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is a configuration file: named deployments, and the event bus
// settings every command shares, so that a region's replicator and writer
// are described once instead of by long flag lists.
//
//	nats:                    # url, or any bus flag by name: stream, subject-prefix, data-dir,
//	  url: nats://a:4222     # replicas, max-age, max-bytes, retention, duplicate-window,
//	  stream: SPECSTAR       # mirror-of, mirror-domain, mirror-api-prefix, domain, max-inflight,
//	  nats-creds: /etc/nats/app.creds  # nats-creds, nats-nkey, tls-ca, tls-cert, tls-key
//	deployments:
//	  prod:
//	    meta: postgres://app@db/app?sslmode=disable
//	    resources: s3://specstar/{model}/data/?region=eu-west-1
//	    blobs: s3://specstar/blobs/?region=eu-west-1
//	  mirror:
//	    url: disk:/var/lib/specstar-mirror
//
// ${VAR} in a value is replaced by the environment variable VAR, so
// secrets stay out of the file; an unset one is an error when the value is
// used (a deployment's, when it is looked up). ${VAR:-default} is default
// when VAR is unset or empty, ${VAR-default} when it is unset.
type Config struct {
	// Path is the file the configuration was read from, for messages.
	Path string `json:"-"`
	// NATS holds bus flag values by flag name; a flag given on the
	// command line wins.
	NATS map[string]string `json:"nats,omitempty"`
	// Deployments by name.
	Deployments map[string]Deployment `json:"deployments,omitempty"`
}

// busFlagNames are the keys the nats section accepts: the bus flags of
// `writer` and `replicator`.
var busFlagNames = []string{
	"url", "nats", "stream", "subject-prefix", "data-dir", "sync-interval", "replicas", "max-age", "max-bytes",
	"retention", "duplicate-window", "mirror-of", "mirror-domain", "mirror-api-prefix", "domain",
	"max-inflight", "nats-creds", "nats-nkey", "tls-ca", "tls-cert", "tls-key",
}

// envRef is ${VAR}, ${VAR:-default} (VAR unset or empty) or
// ${VAR-default} (VAR unset), as a shell reads them.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}`)

// Load reads and checks a configuration file.
func Load(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, raw)
}

// Parse checks a configuration held in memory; path names it in errors.
func Parse(path string, raw []byte) (*Config, error) {
	c := &Config{Path: path}
	if err := yaml.UnmarshalStrict(raw, c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	for k, v := range c.NATS {
		if !slices.Contains(busFlagNames, k) {
			return nil, fmt.Errorf("config %s: nats.%s: unknown setting (known: %s)", path, k, strings.Join(busFlagNames, ", "))
		}
		x, err := expandEnv(v)
		if err != nil {
			return nil, fmt.Errorf("config %s: nats.%s: %w", path, k, err)
		}
		c.NATS[k] = x
	}
	for name, d := range c.Deployments {
		if name == "" || strings.ContainsAny(name, ":/ ") {
			return nil, fmt.Errorf("config %s: deployment name %q: use letters, digits, '-' and '_'", path, name)
		}
		d.Name = name
		r, err := d.Resolved()
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		r.Name = name
		c.Deployments[name] = r
	}
	return c, nil
}

// expandEnv replaces every ${VAR} by the environment variable VAR
// (${VAR:-default}, ${VAR-default}: by the default as a shell does); an
// unset one without a default is an error naming it. A value that lands in a URL's userinfo
// or query is percent-encoded, so a password holding "/", "@", "?" or "#"
// stays one password instead of splitting the URL (the rest was taken as
// a host name and resolved). In a host or path it is left as it is.
func expandEnv(v string) (string, error) {
	var missing []string
	var b strings.Builder
	last := 0
	for _, m := range envRef.FindAllStringSubmatchIndex(v, -1) {
		b.WriteString(v[last:m[0]])
		name := v[m[2]:m[3]]
		x, ok := os.LookupEnv(name)
		if escapedAt(v, m[0]) {
			x = escapeComponent(x)
		}
		if m[4] >= 0 && (!ok || x == "" && v[m[4]:m[5]] == ":-") {
			x, ok = v[m[6]:m[7]], true // the default, written in the file as it is meant
		}
		if !ok {
			missing = append(missing, name)
		}
		b.WriteString(x)
		last = m[1]
	}
	b.WriteString(v[last:])
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variables not set: %s", strings.Join(missing, ", "))
	}
	return b.String(), nil
}

// escapedAt reports whether position i of the URL template v lies in its
// userinfo (between "://" and the authority's last "@") or in its query.
func escapedAt(v string, i int) bool {
	if q := strings.IndexAny(v, "?"); q >= 0 && i > q {
		return true
	}
	start := strings.Index(v, "://")
	if start < 0 || i < start+3 {
		return false
	}
	auth := v[start+3:]
	if end := strings.IndexAny(auth, "/?#"); end >= 0 {
		auth = auth[:end]
	}
	at := strings.LastIndex(auth, "@")
	return at >= 0 && i < start+3+at
}

// escapeComponent percent-encodes every byte outside RFC 3986's unreserved
// set, which is valid, and decodes to the same bytes, in a userinfo and in
// a query value alike.
func escapeComponent(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// Lookup returns the named deployment with its ${VAR}s expanded; ok is
// false if there is no such deployment. Variables are expanded only for
// the deployment used, so a process needs the secrets of its own
// deployments only.
func (c *Config) Lookup(name string) (d Deployment, ok bool, err error) {
	if c == nil {
		return Deployment{}, false, nil
	}
	d, ok = c.Deployments[name]
	if !ok {
		return d, false, nil
	}
	for _, l := range []Layer{MetaLayer, ResourcesLayer, BlobsLayer} {
		p := d.layer(l)
		if *p, err = expandEnv(*p); err != nil {
			return d, true, fmt.Errorf("config %s: deployment %q: %s: %w", c.Path, name, l, err)
		}
	}
	return d, true, nil
}

// bareWord is a --to value with nothing of a path or URL in it.
var bareWord = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// CheckName refuses value when it looks like a deployment's name but is
// not one of c's and no file of that name exists: `--to mirorr`, a typo
// of `mirror`, would otherwise write a new ./mirorr and exit 0. A new
// directory is then given as ./NAME; without deployments in c every value
// is left alone.
func (c *Config) CheckName(value string) error {
	if c == nil || len(c.Deployments) == 0 || !bareWord.MatchString(value) {
		return nil
	}
	if _, ok := c.Deployments[value]; ok {
		return nil
	}
	if _, err := os.Stat(value); err == nil {
		return nil
	}
	names := make([]string, 0, len(c.Deployments))
	for n := range c.Deployments {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Errorf("%q is not a deployment of config %s (%s) nor an existing path: give one of those names, or ./%s for a new directory",
		value, c.Path, strings.Join(names, ", "), value)
}

// ApplyFlags sets the flags of fs that the nats section names and the
// command line did not set; settings fs does not have are ignored (not
// every command talks to the bus the same way).
func (c *Config) ApplyFlags(fs *flag.FlagSet) error {
	if c == nil {
		return nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	keys := make([]string, 0, len(c.NATS))
	for k := range c.NATS {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		name := k
		if k == "url" {
			name = "nats" // the flag's name
		}
		if set[name] || fs.Lookup(name) == nil {
			continue
		}
		if err := fs.Set(name, c.NATS[k]); err != nil {
			return fmt.Errorf("config %s: nats.%s: %w", c.Path, k, err)
		}
	}
	return nil
}

// Flags are the per-layer flags (--meta, --resources, --blobs) and
// --config of a command; Resolve turns them and a positional or --sink /
// --source value into deployments.
type Flags struct {
	Config    string
	Meta      string
	Resources string
	Blobs     string
}

// Register adds --config, --meta, --resources and --blobs to fs; what
// says what the deployment is for ("source", "sink").
func (f *Flags) Register(fs *flag.FlagSet, what string) {
	fs.StringVar(&f.Config, "config", os.Getenv("SPECSTAR_CONFIG"), "YAML file with named deployments and nats settings (default $SPECSTAR_CONFIG)")
	fs.StringVar(&f.Meta, "meta", "", what+" deployment's meta store: disk:/path, postgres://... or redis://host:port/db?prefix={model}:")
	fs.StringVar(&f.Resources, "resources", "", what+" deployment's resource store: disk:/path, postgres://... or s3://bucket/{model}/data/?endpoint=...")
	fs.StringVar(&f.Blobs, "blobs", "", what+" deployment's blob store: disk:/path or s3://bucket/blobs/?endpoint=...")
}

// Load reads the --config file, if any (nil without one).
func (f *Flags) Load() (*Config, error) {
	if f.Config == "" {
		return nil, nil
	}
	return Load(f.Config)
}

// Layered reports whether any of --meta, --resources, --blobs was given.
func (f *Flags) Layered() bool { return f.Meta != "" || f.Resources != "" || f.Blobs != "" }

// FromFlags is the unnamed deployment --meta, --resources and --blobs
// describe, over base (a URL given as --source/--sink or positionally,
// serving the layers the flags leave empty; may be "").
func (f *Flags) FromFlags(base string) (Deployment, error) {
	d := Deployment{URL: base, Meta: f.Meta, Resources: f.Resources, Blobs: f.Blobs}
	return d.Resolved()
}

// Resolve turns one --sink/--source value into a deployment: the name of a
// deployment of cfg, or a store URL (a disk path, disk:, postgres://,
// s3://) serving every layer it can.
func Resolve(cfg *Config, value string) (Deployment, error) {
	if d, ok, err := cfg.Lookup(value); ok || err != nil {
		return d, err
	}
	return Deployment{URL: value}.Resolved()
}
