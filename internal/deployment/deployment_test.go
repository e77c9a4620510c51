package deployment

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

func TestResolved(t *testing.T) {
	tests := []struct {
		name    string
		in      Deployment
		want    Deployment
		wantErr string
	}{
		{name: "disk url serves all three", in: Deployment{URL: "disk:/m"},
			want: Deployment{Meta: "disk:/m", Resources: "disk:/m", Blobs: "disk:/m"}},
		{name: "plain path is disk", in: Deployment{URL: "/m"},
			want: Deployment{Meta: "/m", Resources: "/m", Blobs: "/m"}},
		{name: "postgres url has no blob store", in: Deployment{URL: "postgres://h/db"},
			want: Deployment{Meta: "postgres://h/db", Resources: "postgres://h/db"}},
		{name: "postgres+s3", in: Deployment{Meta: "postgres://h/db", Resources: "s3://b/{model}/data/", Blobs: "s3://b/blobs/"},
			want: Deployment{Meta: "postgres://h/db", Resources: "s3://b/{model}/data/", Blobs: "s3://b/blobs/"}},
		{name: "layer overrides url", in: Deployment{URL: "postgres://h/db", Resources: "s3://b/", Blobs: "disk:/blobs"},
			want: Deployment{Meta: "postgres://h/db", Resources: "s3://b/", Blobs: "disk:/blobs"}},
		{name: "s3 cannot hold metas", in: Deployment{Meta: "s3://b/"}, wantErr: "cannot hold meta"},
		{name: "the all-S3 factory serves all three", in: Deployment{URL: "s3://b/app/?factory=s3"},
			want: Deployment{Meta: "s3://b/app/?factory=s3", Resources: "s3://b/app/?factory=s3", Blobs: "s3://b/app/?factory=s3"}},
		{name: "the all-S3 factory's metas beside another blob store", in: Deployment{URL: "s3://b/?factory=s3", Blobs: "disk:/blobs"},
			want: Deployment{Meta: "s3://b/?factory=s3", Resources: "s3://b/?factory=s3", Blobs: "disk:/blobs"}},
		{name: "redis metas, disk resources and blobs", in: Deployment{Meta: "redis://h:6379/0?prefix={model}:", Resources: "disk:/r", Blobs: "disk:/r"},
			want: Deployment{Meta: "redis://h:6379/0?prefix={model}:", Resources: "disk:/r", Blobs: "disk:/r"}},
		{name: "redis url serves metas only", in: Deployment{URL: "redis://h/0"}, want: Deployment{Meta: "redis://h/0"}},
		{name: "redis cannot hold revisions", in: Deployment{Meta: "redis://h/0", Resources: "redis://h/0"}, wantErr: "cannot hold resources"},
		{name: "postgres cannot hold blobs", in: Deployment{Meta: "postgres://h/db", Blobs: "postgres://h/db"}, wantErr: "cannot hold blobs"},
		{name: "unknown scheme", in: Deployment{URL: "gs://b/"}, wantErr: "unknown store"},
		{name: "a mistyped scheme is not a relative path", in: Deployment{Blobs: "dsk:/tmp/m5"}, wantErr: "unknown store (known schemes: disk:"},
		{name: "a path with a colon written ./", in: Deployment{URL: "./dsk:/tmp/m5"},
			want: Deployment{Meta: "./dsk:/tmp/m5", Resources: "./dsk:/tmp/m5", Blobs: "./dsk:/tmp/m5"}},
		{name: "empty", in: Deployment{}, wantErr: "no store given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.Resolved()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSingle(t *testing.T) {
	tests := []struct {
		in   Deployment
		want string
		ok   bool
	}{
		{Deployment{Meta: "disk:/m", Resources: "disk:/m", Blobs: "disk:/m"}, "disk:/m", true},
		{Deployment{Meta: "postgres://h/db", Resources: "postgres://h/db"}, "postgres://h/db", true},
		{Deployment{Meta: "postgres://h/db", Resources: "s3://b/"}, "", false},
	}
	for _, tt := range tests {
		got, ok := tt.in.Single()
		if got != tt.want || ok != tt.ok {
			t.Errorf("%+v: Single() = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseConfig(t *testing.T) {
	t.Setenv("TEST_PG_PASSWORD", "s3cret")
	good := `
nats:
  url: nats://a:4222
  mirror-of: SPECSTAR
  duplicate-window: 2m
deployments:
  prod:
    meta: postgres://app:${TEST_PG_PASSWORD}@db/app
    resources: s3://specstar/{model}/data/?region=eu-west-1
    blobs: s3://specstar/blobs/
  mirror:
    url: disk:/var/lib/mirror
`
	c, err := Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	prod, ok, err := c.Lookup("prod")
	if err != nil || !ok || prod.Meta != "postgres://app:s3cret@db/app" || prod.Resources != "s3://specstar/{model}/data/?region=eu-west-1" {
		t.Fatalf("prod = %+v", prod)
	}
	if s := prod.String(); strings.Contains(s, "s3cret") || !strings.HasPrefix(s, "prod (") {
		t.Errorf("String() = %q: want the name and no password", s)
	}
	mirror, _, _ := c.Lookup("mirror")
	if u, ok := mirror.Single(); !ok || u != "disk:/var/lib/mirror" {
		t.Fatalf("mirror = %+v", mirror)
	}

	// Flags: the file fills what the command line left unset.
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	natsURL := fs.String("nats", "", "")
	mirrorOf := fs.String("mirror-of", "", "")
	window := fs.Duration("duplicate-window", time.Hour, "")
	if err := fs.Parse([]string{"-mirror-of", "OTHER"}); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyFlags(fs); err != nil {
		t.Fatal(err)
	}
	if *natsURL != "nats://a:4222" || *mirrorOf != "OTHER" || *window != 2*time.Minute {
		t.Fatalf("flags: nats=%q mirror-of=%q window=%v", *natsURL, *mirrorOf, *window)
	}

	bad := []struct{ name, yaml, want string }{
		{"unset env in nats", "nats:\n  url: nats://${TEST_NOT_SET_XYZ}:4222\n", "TEST_NOT_SET_XYZ"},
		{"unknown nats key", "nats:\n  sream: X\n", "nats.sream"},
		{"unknown deployment key", "deployments:\n  a:\n    metas: disk:/x\n", "metas"},
		{"s3 meta", "deployments:\n  a:\n    meta: s3://b/\n", `deployment "a": meta`},
		{"redis blobs", "deployments:\n  a:\n    meta: redis://h/0\n    blobs: redis://h/0\n", `deployment "a": blobs`},
		{"bad name", "deployments:\n  \"a/b\":\n    url: disk:/x\n", "deployment name"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(b.yaml))
			if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), "bad.yaml") {
				t.Fatalf("err = %v, want it to name bad.yaml and %q", err, b.want)
			}
		})
	}
}

// A deployment's secrets are needed only by the process that uses it.
func TestUnsetVariableOnlyMattersWhenUsed(t *testing.T) {
	c, err := Parse("c.yaml", []byte("deployments:\n  prod:\n    meta: postgres://u:${TEST_NOT_SET_XYZ}@h/db\n  mirror:\n    url: disk:/m\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Lookup("mirror"); !ok || err != nil {
		t.Fatalf("Lookup(mirror) = %v, %v", ok, err)
	}
	_, _, err = c.Lookup("prod")
	if err == nil || !strings.Contains(err.Error(), "TEST_NOT_SET_XYZ") || !strings.Contains(err.Error(), "prod") {
		t.Fatalf("Lookup(prod) err = %v, want it to name the variable and the deployment", err)
	}
}

func TestResolveNameOrURL(t *testing.T) {
	c, err := Parse("c.yaml", []byte("deployments:\n  mirror:\n    url: disk:/m\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Resolve(c, "mirror")
	if err != nil || d.Name != "mirror" || d.Meta != "disk:/m" {
		t.Fatalf("Resolve(mirror) = %+v, %v", d, err)
	}
	d, err = Resolve(c, "postgres://h/db")
	if err != nil || d.Meta != "postgres://h/db" || d.Blobs != "" {
		t.Fatalf("Resolve(url) = %+v, %v", d, err)
	}
	// Without a config file a bare word is a relative disk path.
	d, err = Resolve(nil, "mirror")
	if err != nil || d.Meta != "mirror" {
		t.Fatalf("Resolve(nil, mirror) = %+v, %v", d, err)
	}
}

// The Kubernetes origin region's configuration is a valid file: its prod
// deployment is SpecStar's Postgres+S3 factory and its mirror a disk tree.
func TestKubernetesExampleConfig(t *testing.T) {
	const path = "../../deploy/k8s/overlays/region-a/specstar.yaml"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(path, raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SPECSTAR_PG_PASSWORD", "pw")
	prod, ok, err := c.Lookup("prod")
	if err != nil || !ok {
		t.Fatalf("prod: %v %v", ok, err)
	}
	if Scheme(prod.Meta) != "postgres" || Scheme(prod.Resources) != "s3" || Scheme(prod.Blobs) != "s3" {
		t.Errorf("prod = %+v, want Postgres metas and S3 revisions and blobs", prod)
	}
	if u, ok := c.Deployments["mirror"].Single(); !ok || Scheme(u) != "disk" {
		t.Errorf("mirror = %+v, want one disk tree", c.Deployments["mirror"])
	}
}

// ${VAR:-default} and ${VAR-default} take the default as a shell does
// (issue 25 item 6: they were passed through literally).
func TestEnvDefaults(t *testing.T) {
	t.Setenv("TEST_EMPTY_XYZ", "")
	t.Setenv("TEST_SET_XYZ", "p@ss")
	c, err := Parse("c.yaml", []byte("nats:\n  url: nats://${TEST_NOT_SET_XYZ:-nats}:${TEST_EMPTY_XYZ:-4222}\n  stream: ${TEST_EMPTY_XYZ-KEPT}X\n"+
		"deployments:\n  prod:\n    meta: postgres://u:${TEST_SET_XYZ:-none}@h/${TEST_NOT_SET_XYZ-app}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.NATS["url"]; got != "nats://nats:4222" {
		t.Errorf("nats url = %q, want nats://nats:4222", got)
	}
	if got := c.NATS["stream"]; got != "X" {
		t.Errorf("stream = %q, want X (${VAR-default} keeps a set, empty VAR)", got)
	}
	d, ok, err := c.Lookup("prod")
	if !ok || err != nil {
		t.Fatalf("Lookup(prod) = %v, %v", ok, err)
	}
	if got := d.Meta; got != "postgres://u:p%40ss@h/app" {
		t.Errorf("meta = %q, want postgres://u:p%%40ss@h/app", got)
	}
}
