package s3

import (
	"strings"
	"testing"
)

// FuzzParseS3URL: no URL panics the parser, every error names the URL,
// and an accepted URL has a bucket and only http(s) endpoints.
func FuzzParseS3URL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket/{model}/data/?endpoint=http://127.0.0.1:7070&path_style=true",
		"s3://b/%7Bmodel%7D/data/?region=eu-west-1&part_size=16MiB&concurrency=4",
		"s3://b/?blob_bucket=c&blob_prefix=x/&conditional=head&max_attempts=3&encoding=json",
		"s3://b/app/?factory=s3&cache_dir=/tmp/x&cache_models=3", "s3://b?factory=redis",
		"s3://user:pw@b/", "s3://b:9000/", "http://b/", "s3:///x", "s3://b/?part_size=1KiB",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		o, err := ParseURL(raw)
		if err != nil {
			if !strings.Contains(err.Error(), "s3 URL") {
				t.Fatalf("error does not name the URL: %v", err)
			}
			return
		}
		if o.Bucket == "" {
			t.Fatalf("%q accepted without a bucket", raw)
		}
		if o.Endpoint != "" && !strings.HasPrefix(o.Endpoint, "http://") && !strings.HasPrefix(o.Endpoint, "https://") {
			t.Fatalf("%q accepted with endpoint %q", raw, o.Endpoint)
		}
	})
}
