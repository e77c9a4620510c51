package deployment

import (
	"strings"
	"testing"
)

// FuzzParse: no configuration file, however malformed, panics the parser,
// and every error names the file.
func FuzzParse(f *testing.F) {
	f.Add([]byte("nats:\n  url: nats://a:4222\ndeployments:\n  prod:\n    meta: postgres://h/db\n    resources: s3://b/{model}/data/\n    blobs: s3://b/blobs/\n"))
	f.Add([]byte("deployments:\n  m:\n    url: disk:/x\n"))
	f.Add([]byte("deployments: [1, 2]\n"))
	f.Add([]byte("nats: {url: ${X}}\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Parse("fuzz.yaml", raw)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for name := range c.Deployments {
			d, ok, _ := c.Lookup(name)
			if !ok {
				t.Fatalf("deployment %q listed but not found", name)
			}
			_ = d.String()
		}
	})
}
