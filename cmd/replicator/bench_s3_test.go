package main

// S3 benchmarks of the whole pipeline: an archive drained into an S3 sink
// against bare PUTs of the same objects (same run, same server), and the
// peak memory of writer and replicator moving a 1 GiB blob from one S3
// store to another (and to disk) against the same commands with 1 MiB
// and 128 MiB blobs.
//
//	go test ./cmd/replicator -run XXX -bench MirrorS3SinkPipeline -benchtime 2x -timeout 60m
//	go test ./cmd/replicator -run XXX -bench PeakRSSOneGiBBlob -benchtime 1x -timeout 60m -v

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/sink/disk"
	s3sink "github.com/specstar/replicator/sink/s3"
	srcarchive "github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

// benchS3URL names a bucket (and prefix) on the test server as the
// commands take it; credentials come from the environment (srv.Env).
func benchS3URL(srv *s3test.Server, bucket, prefix string) string {
	return "s3://" + bucket + "/" + prefix + "?endpoint=" + url.QueryEscape(srv.Endpoint) + "&region=" + srv.Region + "&path_style=true"
}

// benchS3Env puts the server's credentials into this process's
// environment (for in-process commands and s3sink.Open) for the rest of
// the benchmark.
func benchS3Env(b *testing.B, srv *s3test.Server) {
	b.Helper()
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
}

// benchS3RawClient is an SDK client built as s3sink.Open builds the
// sink's (32 idle connections per host, up to 10 attempts, no retry
// quota), for the raw baseline.
func benchS3RawClient(b *testing.B, srv *s3test.Server) *s3.Client {
	b.Helper()
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConnsPerHost = 32
	})
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithHTTPClient(httpClient),
		config.WithCredentialsProvider(srv.Credentials()), config.WithRegion(srv.Region))
	if err != nil {
		b.Fatal(err)
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(srv.Endpoint)
		o.UsePathStyle = true
		o.Retryer = retry.NewStandard(func(ro *retry.StandardOptions) {
			ro.MaxAttempts = 10
			ro.RateLimiter = ratelimit.None
		})
	})
}

// benchS3Object is one object the S3 sink writes for a revision.
type benchS3Object struct {
	key  string
	body []byte
}

// benchS3Objects computes, from the archive, the objects the S3 sink
// writes with its default layout ({model}/data/ prefix, msgpack info):
// per revision info, data and the uid index object, in that order,
// grouped by resource.
func benchS3Objects(b *testing.B, archive string) [][]benchS3Object {
	b.Helper()
	data, err := os.ReadFile(archive)
	if err != nil {
		b.Fatal(err)
	}
	var groups [][]benchS3Object
	last := ""
	for f, err := range acbak.NewReader(bytes.NewReader(data), acbak.Options{}).All() {
		if err != nil {
			b.Fatal(err)
		}
		rr, ok := f.Record.(*events.RevisionRecord)
		if !ok {
			continue
		}
		res, err := rr.Resource()
		if err != nil {
			b.Fatal(err)
		}
		info, err := res.Info.Encode(events.Msgpack)
		if err != nil {
			b.Fatal(err)
		}
		if res.Info.SchemaVersion.IsSet() {
			b.Fatalf("revision %s has a schema version; the baseline assumes none (no_ver)", res.Info.RevisionID)
		}
		if res.Info.ResourceID != last {
			groups = append(groups, nil)
			last = res.Info.ResourceID
		}
		store := benchPGModel + "/data/resources/store/" + res.Info.UID + "/"
		g := &groups[len(groups)-1]
		*g = append(*g,
			benchS3Object{store + "info", info},
			benchS3Object{store + "data", bytes.Clone(res.RawData)},
			benchS3Object{benchPGModel + "/data/resources/resource/" + res.Info.ResourceID + "/" + res.Info.RevisionID + "/no_ver/uid", []byte(res.Info.UID)})
	}
	return groups
}

// benchRawPutAll PUTs every group's objects in order, 16 groups at a time.
func benchRawPutAll(ctx context.Context, client *s3.Client, bucket string, groups [][]benchS3Object) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(groups) {
					return
				}
				for _, o := range groups[i] {
					_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.key),
						Body: bytes.NewReader(o.body), ContentLength: aws.Int64(int64(len(o.body)))})
					if err != nil {
						once.Do(func() { first = fmt.Errorf("put s3://%s/%s: %w", bucket, o.key, err) })
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// benchCountKeys lists a bucket and counts its objects.
func benchCountKeys(b *testing.B, client *s3.Client, bucket string) int {
	b.Helper()
	n := 0
	p := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			b.Fatalf("list s3://%s: %v", bucket, err)
		}
		n += len(page.Contents)
	}
	return n
}

// benchRemoveBucket deletes a bucket's directory from the server's posix
// backend (faster than deleting its objects one by one), to free the disk.
func benchRemoveBucket(b *testing.B, srv *s3test.Server, bucket string) {
	b.Helper()
	if err := os.RemoveAll(filepath.Join(srv.DataDir, bucket)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMirrorS3SinkPipeline: an archive of 20,000 revisions (2,000
// resources x 10, 1 KiB JSON payloads, and their 2,000 metas, which an S3
// sink skips) replayed onto a fresh embedded JetStream stream, then
// `replicator run --until-drained --sink s3://...` (in-process) into a
// fresh bucket of a versitygw. The timer covers replay and drain. The
// baseline, in the same iteration against the same server: the objects
// the sink writes (info, data, uid index per revision; same keys and
// bytes) PUT by a bare SDK client, 16 resources at a time, before or
// after the pipeline on alternate iterations (run -benchtime 2x).
func BenchmarkMirrorS3SinkPipeline(b *testing.B) {
	const resources, revisions = 2_000, 20_000
	archive := filepath.Join(b.TempDir(), "s3pipeline.acbak")
	if err := writeArchive(archive, resources); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(archive)
	if err != nil {
		b.Fatal(err)
	}
	srv := s3test.Start(b)
	benchS3Env(b, srv)
	raw := benchS3RawClient(b, srv)
	groups := benchS3Objects(b, archive)
	if len(groups) != resources {
		b.Fatalf("archive has %d resources, want %d", len(groups), resources)
	}
	ctx := context.Background()
	var replayed, drained, rawPut time.Duration
	// rawPass is the baseline, off the benchmark's clock.
	rawPass := func(bucket string) {
		b.StopTimer()
		defer b.StartTimer()
		srv.CreateBucket(b, bucket)
		start := time.Now()
		if err := benchRawPutAll(ctx, raw, bucket, groups); err != nil {
			b.Fatal(err)
		}
		rawPut += time.Since(start)
		if n := benchCountKeys(b, raw, bucket); n != 3*revisions {
			b.Fatalf("the raw bucket holds %d objects, want %d", n, 3*revisions)
		}
		benchRemoveBucket(b, srv, bucket)
	}
	iter := 0
	for b.Loop() {
		iter++
		// Every other iteration the baseline goes first, so that a drift
		// in the machine's load does not favour either.
		rawFirst := iter%2 == 0
		if rawFirst {
			rawPass(fmt.Sprintf("pipe%draw", iter))
		}
		b.StopTimer()
		bus, err := stream.Open(ctx, stream.Config{DataDir: b.TempDir()}, quietLog())
		if err != nil {
			b.Fatal(err)
		}
		bucket := fmt.Sprintf("pipe%d", iter)
		srv.CreateBucket(b, bucket)
		f, err := os.Open(archive)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start := time.Now()
		pub := bus.NewPublisher(512)
		_, err = srcarchive.Replay(ctx, f, acbak.Options{}, bus.Prefix(), bus.BlobBucket(), pub, nil)
		if err == nil {
			err = pub.Flush(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		replayed += time.Since(start)
		start = time.Now()
		var out, errs bytes.Buffer
		code := run(ctx, []string{"run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", benchS3URL(srv, bucket, "")}, &out, &errs)
		drained += time.Since(start)

		b.StopTimer()
		f.Close()
		bus.Close()
		if code != exitOK {
			b.Fatalf("replicator run: exit %d\n%s%s", code, out.String(), errs.String())
		}
		if want := fmt.Sprintf("%d events applied, 0 dead-lettered", revisions+resources); !strings.Contains(out.String(), want) {
			b.Fatalf("replicator run: want %q, got %s", want, out.String())
		}
		if n := benchCountKeys(b, raw, bucket); n != 3*revisions {
			b.Fatalf("the sink's bucket holds %d objects, want %d", n, 3*revisions)
		}
		benchRemoveBucket(b, srv, bucket)
		b.StartTimer()
		if !rawFirst {
			rawPass(fmt.Sprintf("pipe%draw", iter))
		}
	}
	n := float64(b.N)
	b.ReportMetric(revisions*n/b.Elapsed().Seconds(), "revisions/s")
	b.ReportMetric(float64(st.Size())*n/b.Elapsed().Seconds()/1e6, "MB/s")
	b.ReportMetric(replayed.Seconds()/n, "replay-s")
	b.ReportMetric(revisions*n/drained.Seconds(), "drain-revisions/s")
	b.ReportMetric(revisions*n/rawPut.Seconds(), "rawput-revisions/s")
	b.ReportMetric(rawPut.Seconds()/drained.Seconds(), "drain/rawput")
}

// benchBlobReader is a blob's bytes from a seeded generator, so a blob of
// any size is never held in memory: the same seed gives the same bytes.
func benchBlobReader(seed byte, size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{seed, 'b', 'l', 'o', 'b'}), size)
}

// benchHashReader returns the file_id and length of what r yields.
func benchHashReader(r io.Reader) (string, int64, error) {
	h := dedup.NewFileIDHasher()
	n, err := io.Copy(h, r)
	return dedup.HexSum(h), n, err
}

// benchPutSourceStore fills an S3 store the way SpecStar's S3BlobStore
// and S3ResourceStore do: the blob's raw bytes at blobs/{file_id}, and one
// revision of model "doc" whose msgpack payload references it. The bytes
// stream from the generator (hashed in a first pass, uploaded in a
// second, multipart, 8 MiB at a time). It returns the file_id.
func benchPutSourceStore(b *testing.B, srv *s3test.Server, bucket string, seed byte, size int64) string {
	b.Helper()
	ctx := context.Background()
	fileID, n, err := benchHashReader(benchBlobReader(seed, size))
	if err != nil || n != size {
		b.Fatalf("generate blob: %d bytes, %v", n, err)
	}
	srv.CreateBucket(b, bucket)
	s, err := s3sink.Open(ctx, s3sink.Options{Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.ApplyBlob(ctx, fileID, size, "application/octet-stream", benchBlobReader(seed, size)); err != nil {
		b.Fatalf("put source blob %s: %v", fileID, err)
	}
	payload, err := events.EncodeValue(events.Msgpack, events.Struct{Declared: 2, Fields: []events.StructField{
		{Name: "title", Value: fmt.Sprintf("a %d-byte blob", size)},
		{Name: "file", Value: events.Struct{Declared: 4, Fields: []events.StructField{
			{Name: "file_id", Value: fileID}, {Name: "size", Value: size}, {Name: "content_type", Value: "application/octet-stream"}}}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	t := events.Time{Time: time.Date(2024, 3, 1, 9, 0, 0, 0, time.UTC)}
	rid := "doc:big"
	res := &events.RawResource{Info: events.RevisionInfo{
		UID: "8c3f1a52-5b7e-4d2a-9f3e-0c1d2e3f4a5b", ResourceID: rid, RevisionID: rid + ":1",
		ParentRevisionID: events.Null[string](), SchemaVersion: events.Null[string](),
		DataHash: events.Some(dedup.DataHash(payload)), Status: "stable",
		CreatedTime: t, UpdatedTime: t, CreatedBy: "bench", UpdatedBy: "bench",
	}, RawData: payload}
	if _, err := s.ApplyRevision(ctx, "doc", res); err != nil {
		b.Fatalf("put source revision: %v", err)
	}
	return fileID
}

// benchPeakRSS runs cmd to completion and returns the exec'd program's
// own peak resident set (VmHWM, KiB, polled every 5 ms; see
// BenchmarkMirrorPeakRSS for why not ru_maxrss), its run time and its
// output.
func benchPeakRSS(b *testing.B, cmd *exec.Cmd) (kib int64, took time.Duration, output string) {
	b.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		if v := vmHWM(cmd.Process.Pid); v > kib {
			kib = v
		}
		select {
		case err := <-done:
			if err != nil {
				b.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out.String())
			}
			return kib, time.Since(start), out.String()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// benchFreeBytes is the space available to unprivileged users on the
// file system holding dir.
func benchFreeBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		b.Fatal(err)
	}
	return int64(fs.Bavail) * int64(fs.Bsize)
}

// benchBlobRun is what one blob size cost each command.
type benchBlobRun struct {
	writerKiB, s3KiB, diskKiB    int64
	writerDur, s3Dur, diskDur    time.Duration
	s3Retries, diskRetries       int // "sink error; retrying" lines of each replicator
	fileID                       string
	srcBucket, dstBucket, mirror string
}

// benchMirrorBlob moves one blob of size bytes end to end: put into a
// source S3 store, `writer snapshot --resources s3://src/ --blobs
// s3://src/blobs/` onto a fresh stream (streamed into the JetStream
// object store), then `replicator run --until-drained` into an S3 bucket
// (multipart) and, separately, into a disk sink; every command a child
// process whose peak RSS is read. The mirrored bytes are hashed back.
func benchMirrorBlob(b *testing.B, srv *s3test.Server, raw *s3.Client, bins benchBins, name string, seed byte, size int64) benchBlobRun {
	b.Helper()
	ctx := context.Background()
	r := benchBlobRun{srcBucket: "src-" + name, dstBucket: "dst-" + name, mirror: filepath.Join(b.TempDir(), "mirror")}
	r.fileID = benchPutSourceStore(b, srv, r.srcBucket, seed, size)
	srv.CreateBucket(b, r.dstBucket)
	busDir := b.TempDir()
	bus, err := stream.Open(ctx, stream.Config{DataDir: busDir}, quietLog())
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		bus.Close()
		os.RemoveAll(busDir)
	}()
	env := append(os.Environ(), srv.Env()...)

	cmd := exec.Command(bins.writer, "snapshot", "--nats", bus.URL(),
		"--resources", benchS3URL(srv, r.srcBucket, ""), "--blobs", benchS3URL(srv, r.srcBucket, "blobs/"))
	cmd.Env = env
	var out string
	r.writerKiB, r.writerDur, out = benchPeakRSS(b, cmd)
	benchLogf(b, "writer snapshot, %d bytes: %s, peak RSS %d KiB:\n%s", size, r.writerDur, r.writerKiB, out)
	if !strings.Contains(out, "1 revisions, 1 blobs") {
		b.Fatalf("writer snapshot published something else than 1 revision and 1 blob:\n%s", out)
	}
	for _, to := range []struct {
		sink     string
		kib      *int64
		took     *time.Duration
		retries  *int
		describe string
	}{
		{benchS3URL(srv, r.dstBucket, ""), &r.s3KiB, &r.s3Dur, &r.s3Retries, "s3"},
		{"disk:" + r.mirror, &r.diskKiB, &r.diskDur, &r.diskRetries, "disk"},
	} {
		cmd := exec.Command(bins.replicator, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", to.sink)
		cmd.Env = env
		*to.kib, *to.took, out = benchPeakRSS(b, cmd)
		*to.retries = strings.Count(out, "sink error; retrying")
		benchLogf(b, "replicator run --sink %s, %d bytes: %s, peak RSS %d KiB:\n%s", to.describe, size, *to.took, *to.kib, out)
		if !strings.Contains(out, "2 events applied, 0 dead-lettered") {
			b.Fatalf("replicator run --sink %s (%s): want the revision and the blob applied:\n%s", to.sink, to.describe, out)
		}
	}

	// The mirrored bytes, read back streamed, hash to the file_id.
	obj, err := raw.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(r.dstBucket), Key: aws.String("blobs/" + r.fileID)})
	if err != nil {
		b.Fatalf("get mirrored blob s3://%s/blobs/%s: %v", r.dstBucket, r.fileID, err)
	}
	id, n, err := benchHashReader(obj.Body)
	obj.Body.Close()
	if err != nil || id != r.fileID || n != size {
		b.Fatalf("S3 mirror s3://%s/blobs/%s: %d bytes hashing to %s (%v), want %d bytes hashing to the file_id", r.dstBucket, r.fileID, n, id, err, size)
	}
	d, err := disk.Open(ctx, r.mirror, disk.Options{})
	if err != nil {
		b.Fatal(err)
	}
	bin, rc, err := d.OpenBlob(ctx, r.fileID)
	if err != nil {
		b.Fatalf("disk mirror blob %s: %v", r.fileID, err)
	}
	id, n, err = benchHashReader(rc)
	rc.Close()
	d.Close()
	if err != nil || id != r.fileID || n != size || bin.Size.Value != size {
		b.Fatalf("disk mirror blob %s: %d bytes (header says %d) hashing to %s (%v), want %d bytes hashing to the file_id", r.fileID, n, bin.Size.Value, id, err, size)
	}
	return r
}

// benchLogf logs the commands' output with -v only (a benchmark's log is
// printed even without).
func benchLogf(b *testing.B, format string, args ...any) {
	b.Helper()
	if testing.Verbose() {
		b.Logf(format, args...)
	}
}

// benchBins are the built commands.
type benchBins struct{ writer, replicator string }

// BenchmarkPeakRSSOneGiBBlob: the peak RSS of `writer snapshot` (S3 store
// to the stream's object store), `replicator run --sink s3://` (object
// store to S3, multipart) and `replicator run --sink disk:` moving one
// random blob of 1 MiB (the baseline; it also travels through the object
// store, as it does not fit in a 1 MiB message), 128 MiB and 1 GiB
// (BENCH_BLOB_MIB overrides the largest), one sub-benchmark each. The
// stream is an embedded JetStream server in the test process, so the
// commands' RSS is theirs alone. Needs ~6 GiB free in the temporary
// directory (the largest blob is in the source bucket, the object store,
// the destination bucket and the disk mirror at once).
func BenchmarkPeakRSSOneGiBBlob(b *testing.B) {
	bigMiB := int64(1024)
	if v := os.Getenv("BENCH_BLOB_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			b.Fatalf("BENCH_BLOB_MIB=%q: want a positive number of MiB", v)
		}
		bigMiB = n
	}
	need := max(6*bigMiB<<20, 1<<30)
	if free := benchFreeBytes(b, os.TempDir()); free < need {
		b.Fatalf("BenchmarkPeakRSSOneGiBBlob needs %.1f GiB free in %s, has %.1f GiB", float64(need)/(1<<30), os.TempDir(), float64(free)/(1<<30))
	}
	dir := b.TempDir()
	bins := benchBins{writer: filepath.Join(dir, "writer"), replicator: filepath.Join(dir, "replicator")}
	for bin, pkg := range map[string]string{bins.writer: "../writer", bins.replicator: "."} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	srv := s3test.Start(b)
	benchS3Env(b, srv)
	raw := srv.Client(b)
	mib := func(kib int64) float64 { return float64(kib) / 1024 }
	for i, sizeMiB := range []int64{1, 128, bigMiB} {
		b.Run(fmt.Sprintf("blob=%dMiB", sizeMiB), func(b *testing.B) {
			iter := 0
			for b.Loop() {
				iter++
				r := benchMirrorBlob(b, srv, raw, bins, fmt.Sprintf("%dmib-%d", sizeMiB, iter), byte(i+1), sizeMiB<<20)
				benchRemoveBucket(b, srv, r.srcBucket)
				benchRemoveBucket(b, srv, r.dstBucket)
				if err := os.RemoveAll(r.mirror); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(mib(r.writerKiB), "MiB-writer")
				b.ReportMetric(mib(r.s3KiB), "MiB-repl-s3")
				b.ReportMetric(mib(r.diskKiB), "MiB-repl-disk")
				b.ReportMetric(r.writerDur.Seconds(), "s-writer")
				b.ReportMetric(r.s3Dur.Seconds(), "s-repl-s3")
				b.ReportMetric(r.diskDur.Seconds(), "s-repl-disk")
				b.ReportMetric(float64(r.s3Retries), "retries-s3")
				b.ReportMetric(float64(r.diskRetries), "retries-disk")
			}
		})
	}
}
