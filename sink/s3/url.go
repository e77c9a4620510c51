package s3

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/specstar/replicator/internal/redact"

	"github.com/specstar/replicator/events"
)

// ParseURL reads an S3 sink URL,
// s3://bucket/prefix?endpoint=&region=&path_style=true&blob_bucket=&blob_prefix=&encoding=json|msgpack&concurrency=&part_size=&conditional=&max_attempts=
// (and, for SpecStar's all-S3 factory, factory=s3&cache_dir=&cache_models=)
// so that a store is named by one string on a command line. The path is
// the prefix without its leading "/": "/{model}/data/" (braces literal or
// as %7B%7D) gives Prefix "{model}/data/". part_size takes bytes or a
// KiB/MiB/GiB suffix. Unknown keys are errors, naming the URL and the key.
func ParseURL(raw string) (Options, error) {
	var o Options
	fail := func(format string, args ...any) (Options, error) {
		return Options{}, fmt.Errorf("sink: s3 URL %q: %s", raw, fmt.Sprintf(format, args...))
	}
	// Literal braces are legal in what users type but not in a URL path;
	// escape them so url.Parse accepts both spellings.
	escaped := strings.NewReplacer("{", "%7B", "}", "%7D").Replace(raw)
	u, err := url.Parse(escaped)
	if err != nil {
		return fail("%v", redact.ParseError(err))
	}
	if u.Scheme != "s3" {
		return fail("scheme %q is not s3", u.Scheme)
	}
	if u.User != nil {
		return fail("credentials do not belong in the URL (they come from the AWS chain)")
	}
	if u.Host == "" {
		return fail("no bucket")
	}
	if u.Port() != "" || strings.ContainsAny(u.Host, ":/") {
		return fail("bucket %q is not a bucket name (a custom server goes in endpoint=)", u.Host)
	}
	if u.Fragment != "" {
		return fail("unexpected fragment #%s", u.Fragment)
	}
	o.Bucket = u.Host
	o.Prefix = strings.TrimPrefix(u.Path, "/")
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fail("query: %v", err)
	}
	for key, vs := range q {
		v := vs[len(vs)-1]
		bad := func(why string) (Options, error) {
			return fail("%s=%q: %s", key, v, why)
		}
		switch key {
		case "endpoint":
			eu, err := url.Parse(v)
			if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
				return bad("not an http(s) URL")
			}
			o.Endpoint = v
		case "region":
			o.Region = v
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("not a boolean")
			}
			o.PathStyle = b
		case "blob_bucket":
			if v == "" || strings.ContainsAny(v, "/:") {
				return bad("not a bucket name")
			}
			o.BlobBucket = v
		case "blob_prefix":
			o.BlobPrefix = v
		case "encoding":
			e, err := events.ParseEncoding(v)
			if err != nil {
				return bad(err.Error())
			}
			o.Encoding = events.Some(e)
		case "concurrency":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return bad("not a positive integer")
			}
			o.Concurrency = n
		case "part_size":
			n, err := parseByteSize(v)
			if err != nil {
				return bad(err.Error())
			}
			if n < minS3PartSize || n > maxS3PartSize {
				return bad("outside S3's part size limits (5 MiB to 5 GiB)")
			}
			o.PartSize = n
		case "conditional":
			switch v {
			case condAuto, condINM, condHead:
			default:
				return bad(fmt.Sprintf("want %s, %s or %s", condAuto, condINM, condHead))
			}
			o.Conditional = v
		case "factory":
			if v != "s3" {
				return bad("the only factory an s3:// URL names is s3 (SpecStar's all-S3 storage factory)")
			}
			o.Factory = true
		case "cache_dir":
			if v == "" {
				return bad("empty")
			}
			o.CacheDir = v
		case "cache_models":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return bad("not a positive integer")
			}
			o.CacheModels = n
		case "max_attempts":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return bad("not a positive integer")
			}
			o.MaxAttempts = n
		default:
			return fail("unknown option %q", key)
		}
	}
	return o, nil
}

// parseByteSize reads "8388608", "8MiB", "512KiB" or "1GiB".
func parseByteSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("not a size in bytes (or KiB, MiB, GiB)")
	}
	return n * mult, nil
}

// ParseBlobURL reads an s3:// URL naming a blob store (a deployment's
// --blobs): the bucket holds the blobs and the path is their prefix
// ("blobs/" when none is given), unless blob_bucket= or blob_prefix= say
// otherwise. The resource side of the options is left empty.
func ParseBlobURL(raw string) (Options, error) {
	o, err := ParseURL(raw)
	if err != nil {
		return o, err
	}
	if o.BlobBucket == "" {
		o.BlobBucket = o.Bucket
	}
	if o.Factory {
		// The all-S3 factory's blob store, {prefix}blobs/ unless said otherwise.
		if o.BlobPrefix == "" {
			o.BlobPrefix = factoryBase(o.Prefix) + defaultS3BlobPrefix
		}
		o.Factory = false
	}
	if o.BlobPrefix == "" {
		o.BlobPrefix = "blobs/"
		if p := o.Prefix; p != "" {
			if !strings.HasSuffix(p, "/") {
				p += "/"
			}
			o.BlobPrefix = p
		}
	}
	o.Bucket, o.Prefix = o.BlobBucket, "" // the resource side of this store is not used
	return o, nil
}
