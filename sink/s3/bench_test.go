package s3

// S3 sink benchmarks, each function against its own versitygw and each
// iteration into a fresh bucket: revisions and blobs through the sink,
// the same objects PUT with a bare SDK client (the baselines), and both
// alternately against one server (the ...VsRaw... benchmarks), so that
// the sink's cost is a ratio measured in the same run.
//
//	go test ./sink -run XXX -bench S3 -benchtime 2x -timeout 60m

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/synth"
	"github.com/specstar/replicator/sink/internal/store"
)

// Sizes of the S3 benchmarks.
const (
	s3BenchRevsPerRes  = 10
	s3BenchPayload     = 1024 // payload bytes of a revision (JSON)
	s3BenchParallel    = 16   // the replicator's default --parallel
	s3BenchModel       = "model0"
	s3BenchContentType = "application/octet-stream"
)

// benchRevision is one revision with the three objects the sink writes
// for it, encoded beforehand for the raw baseline.
type benchRevision struct {
	res       *events.RawResource
	info      []byte // msgpack RevisionInfo, the sink's default encoding
	dataKey   string
	infoKey   string
	indexKey  string
	uidObject []byte
}

// benchResources is the number of resources per iteration (10 revisions
// each): 2,000 (20,000 revisions, as in BenchmarkMirrorS3SinkPipeline),
// or BENCH_S3_RESOURCES. The number matters: versitygw serves a fresh
// bucket's first ~5,000 objects at a third of its later rate.
func benchResources(b *testing.B) int {
	b.Helper()
	v := os.Getenv("BENCH_S3_RESOURCES")
	if v == "" {
		return 2000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("BENCH_S3_RESOURCES=%q: want a positive number", v)
	}
	return n
}

// benchRevisions builds SpecStar-shaped revisions, grouped by resource
// (10 consecutive revisions each, parent links, data_hash, stable), as an
// archive replay delivers them.
func benchRevisions(b *testing.B) (byResource [][]benchRevision, payloadBytes int64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(11, 1))
	base := time.Date(2024, 3, 1, 9, 0, 0, 0, time.UTC)
	keys := &Sink{opts: Options{Prefix: defaultS3Prefix}}
	for r := range benchResources(b) {
		rid := s3BenchModel + ":" + synth.UUID(rng)
		created := base.Add(time.Duration(r) * time.Second)
		var revs []benchRevision
		for n := 1; n <= s3BenchRevsPerRes; n++ {
			payload := synth.Payload(events.JSON, r*s3BenchRevsPerRes+n, s3BenchPayload)
			parent := events.Null[string]()
			if n > 1 {
				parent = events.Some(fmt.Sprintf("%s:%d", rid, n-1))
			}
			t := events.Time{Time: created.Add(time.Duration(n) * time.Millisecond)}
			res := &events.RawResource{Info: events.RevisionInfo{
				UID: synth.UUID(rng), ResourceID: rid, RevisionID: fmt.Sprintf("%s:%d", rid, n),
				ParentRevisionID: parent, SchemaVersion: events.Null[string](),
				DataHash: events.Some(dedup.DataHash(payload)), Status: "stable",
				CreatedTime: t, UpdatedTime: t, CreatedBy: "bench", UpdatedBy: "bench",
			}, RawData: payload}
			info, err := res.Info.Encode(events.Msgpack)
			if err != nil {
				b.Fatal(err)
			}
			revs = append(revs, benchRevision{
				res: res, info: info,
				dataKey:   keys.storeKey(s3BenchModel, res.Info.UID, "data"),
				infoKey:   keys.storeKey(s3BenchModel, res.Info.UID, "info"),
				indexKey:  keys.indexKey(s3BenchModel, rid, res.Info.RevisionID, res.Info.SchemaVersion),
				uidObject: []byte(res.Info.UID),
			})
			payloadBytes += int64(len(payload))
		}
		byResource = append(byResource, revs)
	}
	return byResource, payloadBytes
}

// benchS3Sink opens a sink on bucket straight at the server (no proxy),
// with every default but the credentials.
func benchS3Sink(b *testing.B, srv *s3test.Server, bucket string) *Sink {
	b.Helper()
	s, err := openS3(context.Background(), Options{Bucket: bucket, Endpoint: srv.Endpoint, PathStyle: true, Region: srv.Region},
		config.WithCredentialsProvider(srv.Credentials()))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchRawClient is an SDK client built as openS3 builds the sink's (same
// HTTP transport settings, retryer and checksum defaults), for the raw
// baselines.
func benchRawClient(b *testing.B, srv *s3test.Server) *s3.Client {
	b.Helper()
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConnsPerHost = 2 * defaultS3Concurrency
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
			ro.MaxAttempts = defaultS3Attempts
			ro.RateLimiter = ratelimit.None
		})
	})
}

// benchBucket creates a fresh bucket with the timer stopped; the returned
// func removes its directory from the server's posix backend, also off
// the clock, so the disk does not fill over many iterations.
func benchBucket(b *testing.B, srv *s3test.Server, name string) (remove func()) {
	b.Helper()
	b.StopTimer()
	srv.CreateBucket(b, name)
	b.StartTimer()
	return func() {
		b.StopTimer()
		if err := os.RemoveAll(filepath.Join(srv.DataDir, name)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// forEachParallel runs fn on every item from s3BenchParallel goroutines
// and returns the first error.
func forEachParallel[T any](items []T, fn func(T) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range s3BenchParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(items) {
					return
				}
				if err := fn(items[i]); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func reportRevisions(b *testing.B, revisions int, payloadBytes int64) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(revisions)/sec, "revisions/s")
	b.ReportMetric(float64(payloadBytes)/sec/1e6, "MB/s")
}

// benchPass writes one iteration's objects into a fresh bucket.
type benchPass func(bucket string) error

// benchLoop runs pass once per iteration, each into a fresh bucket.
func benchLoop(b *testing.B, srv *s3test.Server, name string, pass benchPass) {
	b.Helper()
	iter := 0
	for b.Loop() {
		iter++
		bucket := fmt.Sprintf("%s%d", name, iter)
		remove := benchBucket(b, srv, bucket)
		if err := pass(bucket); err != nil {
			b.Fatal(err)
		}
		remove()
	}
}

// benchInterleave runs both passes each iteration against one server,
// each into a fresh bucket, alternating which goes first, and returns
// the seconds each took in total: a ratio of two load-sensitive rates on
// a shared machine is only meaningful when both are measured at the same
// moments.
func benchInterleave(b *testing.B, srv *s3test.Server, sinkPass, rawPass benchPass) (sinkSec, rawSec float64) {
	b.Helper()
	iter := 0
	for b.Loop() {
		iter++
		order := []struct {
			name string
			pass benchPass
			sec  *float64
		}{{"sink", sinkPass, &sinkSec}, {"raw", rawPass, &rawSec}}
		if iter%2 == 0 {
			order[0], order[1] = order[1], order[0]
		}
		for _, o := range order {
			bucket := fmt.Sprintf("vs%s%d", o.name, iter)
			remove := benchBucket(b, srv, bucket)
			start := time.Now()
			if err := o.pass(bucket); err != nil {
				b.Fatal(err)
			}
			*o.sec += time.Since(start).Seconds()
			remove()
		}
	}
	return sinkSec, rawSec
}

// sinkRevisionsPass applies every revision through (*S3).ApplyRevision
// from 16 goroutines, a resource's revisions in order, then Flushes.
func sinkRevisionsPass(b *testing.B, srv *s3test.Server, revs [][]benchRevision) benchPass {
	ctx := context.Background()
	return func(bucket string) error {
		s := benchS3Sink(b, srv, bucket)
		defer s.Close()
		var written atomic.Int64
		err := forEachParallel(revs, func(rs []benchRevision) error {
			for _, r := range rs {
				out, err := s.ApplyRevision(ctx, s3BenchModel, r.res)
				if err != nil {
					return err
				}
				if out != store.Written {
					return fmt.Errorf("revision %s into a fresh bucket: %v, want written", r.res.Info.RevisionID, out)
				}
				written.Add(1)
			}
			return nil
		})
		if err == nil {
			err = s.Flush(ctx)
		}
		if err == nil && written.Load() != int64(len(revs)*s3BenchRevsPerRes) {
			err = fmt.Errorf("%d revisions written, want %d", written.Load(), len(revs)*s3BenchRevsPerRes)
		}
		return err
	}
}

// rawRevisionsPass PUTs the objects the sink writes for each revision
// (info, data, uid index object; same keys, bytes and order) with a bare
// SDK client from 16 goroutines: no reads, no conditions, no checks.
func rawRevisionsPass(client *s3.Client, revs [][]benchRevision) benchPass {
	ctx := context.Background()
	return func(bucket string) error {
		return forEachParallel(revs, func(rs []benchRevision) error {
			for _, r := range rs {
				for _, o := range []struct {
					key  string
					body []byte
				}{{r.infoKey, r.info}, {r.dataKey, r.res.RawData}, {r.indexKey, r.uidObject}} {
					if err := benchPut(ctx, client, bucket, o.key, o.body, ""); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
}

// BenchmarkS3SinkRevisions: 20,000 revisions (2,000 resources x 10, 1 KiB
// JSON payloads) through (*S3).ApplyRevision from 16 goroutines, each
// taking a resource's revisions in order as the replicator does, then
// Flush. Per revision the sink GETs the index object (absent), creates
// info with If-None-Match, PUTs data, then the index object.
func BenchmarkS3SinkRevisions(b *testing.B) {
	srv := s3test.Start(b)
	revs, payloadBytes := benchRevisions(b)
	benchLoop(b, srv, "sinkrev", sinkRevisionsPass(b, srv, revs))
	reportRevisions(b, len(revs)*s3BenchRevsPerRes, payloadBytes)
}

// BenchmarkS3RawPut is BenchmarkS3SinkRevisions's baseline: the same three
// objects per revision PUT with a bare SDK client from 16 goroutines.
func BenchmarkS3RawPut(b *testing.B) {
	srv := s3test.Start(b)
	revs, payloadBytes := benchRevisions(b)
	benchLoop(b, srv, "rawrev", rawRevisionsPass(benchRawClient(b, srv), revs))
	reportRevisions(b, len(revs)*s3BenchRevsPerRes, payloadBytes)
}

// BenchmarkS3SinkVsRawPut runs BenchmarkS3SinkRevisions's and
// BenchmarkS3RawPut's passes alternately against one server and reports
// both rates and their ratio, measured at the same moments.
func BenchmarkS3SinkVsRawPut(b *testing.B) {
	srv := s3test.Start(b)
	revs, _ := benchRevisions(b)
	sinkSec, rawSec := benchInterleave(b, srv, sinkRevisionsPass(b, srv, revs), rawRevisionsPass(benchRawClient(b, srv), revs))
	n := float64(b.N * len(revs) * s3BenchRevsPerRes)
	b.ReportMetric(n/sinkSec, "sink-revisions/s")
	b.ReportMetric(n/rawSec, "raw-revisions/s")
	b.ReportMetric(rawSec/sinkSec, "sink/raw")
}

func benchPut(ctx context.Context, client *s3.Client, bucket, key string, body []byte, contentType string) error {
	in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	if _, err := client.PutObject(ctx, in); err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", bucket, key, err)
	}
	return nil
}

// benchBlobCase is one blob size of the blob benchmarks: count distinct
// random blobs per iteration, written by parallel goroutines or one at a
// time.
type benchBlobCase struct {
	name     string
	size     int
	count    int
	parallel bool
}

// benchBlobCases are many small blobs at the replicator's parallelism,
// and large ones (above the 8 MiB part size: multipart for the sink) one
// at a time, as one large event is applied.
func benchBlobCases() []benchBlobCase {
	return []benchBlobCase{
		{name: "size=64KiB", size: 64 << 10, count: 512, parallel: true},
		{name: "size=32MiB", size: 32 << 20, count: 4, parallel: false},
	}
}

// benchBlob is a blob and its file_id.
type benchBlob struct {
	id   string
	data []byte
}

func benchBlobs(c benchBlobCase) []benchBlob {
	rng := rand.NewChaCha8([32]byte{byte(c.size), byte(c.size >> 8), byte(c.size >> 16), byte(c.size >> 24)})
	blobs := make([]benchBlob, c.count)
	for i := range blobs {
		data := make([]byte, c.size)
		_, _ = rng.Read(data) // ChaCha8.Read never fails
		blobs[i] = benchBlob{id: dedup.FileID(data), data: data}
	}
	return blobs
}

// runBlobs writes the case's blobs with put, in parallel or one by one.
func runBlobs(c benchBlobCase, blobs []benchBlob, put func(benchBlob) error) error {
	if c.parallel {
		return forEachParallel(blobs, put)
	}
	for _, bl := range blobs {
		if err := put(bl); err != nil {
			return err
		}
	}
	return nil
}

func reportBlobs(b *testing.B, c benchBlobCase) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(c.count)/sec, "blobs/s")
	b.ReportMetric(float64(c.count*c.size)/sec/1e6, "MB/s")
}

// sinkBlobsPass writes the case's blobs through (*S3).ApplyBlob from an
// io.Reader, then Flushes.
func sinkBlobsPass(b *testing.B, srv *s3test.Server, c benchBlobCase, blobs []benchBlob) benchPass {
	ctx := context.Background()
	return func(bucket string) error {
		s := benchS3Sink(b, srv, bucket)
		defer s.Close()
		err := runBlobs(c, blobs, func(bl benchBlob) error {
			out, err := s.ApplyBlob(ctx, bl.id, int64(len(bl.data)), s3BenchContentType, bytes.NewReader(bl.data))
			if err == nil && out != store.Written {
				err = fmt.Errorf("blob %s into a fresh bucket: %v, want written", bl.id, out)
			}
			return err
		})
		if err == nil {
			err = s.Flush(ctx)
		}
		return err
	}
}

// rawBlobsPass PUTs the same blobs at the same keys with the same content
// type, one PutObject of a bytes.Reader each (a single request even for
// 32 MiB), no HEAD, no hashing, no condition.
func rawBlobsPass(client *s3.Client, c benchBlobCase, blobs []benchBlob) benchPass {
	ctx := context.Background()
	return func(bucket string) error {
		return runBlobs(c, blobs, func(bl benchBlob) error {
			return benchPut(ctx, client, bucket, defaultS3BlobPrefix+bl.id, bl.data, s3BenchContentType)
		})
	}
}

// BenchmarkS3SinkBlobs: distinct random blobs through (*S3).ApplyBlob:
// 512 of 64 KiB from 16 goroutines (a HEAD, the bytes read into one
// buffer and hashed, a PUT with If-None-Match), and 4 of 32 MiB one at a
// time (a HEAD, then a multipart upload of 8 MiB parts with CRC32 part
// checksums, hashed as they are read).
func BenchmarkS3SinkBlobs(b *testing.B) {
	srv := s3test.Start(b)
	for _, c := range benchBlobCases() {
		blobs := benchBlobs(c)
		b.Run(c.name, func(b *testing.B) {
			benchLoop(b, srv, fmt.Sprintf("sinkblob%d-", c.size>>10), sinkBlobsPass(b, srv, c, blobs))
			reportBlobs(b, c)
		})
	}
}

// BenchmarkS3RawPutBlobs is BenchmarkS3SinkBlobs's baseline: the same
// blobs, one bare PutObject each.
func BenchmarkS3RawPutBlobs(b *testing.B) {
	srv := s3test.Start(b)
	client := benchRawClient(b, srv)
	for _, c := range benchBlobCases() {
		blobs := benchBlobs(c)
		b.Run(c.name, func(b *testing.B) {
			benchLoop(b, srv, fmt.Sprintf("rawblob%d-", c.size>>10), rawBlobsPass(client, c, blobs))
			reportBlobs(b, c)
		})
	}
}

// BenchmarkS3SinkVsRawPutBlobs runs BenchmarkS3SinkBlobs's and
// BenchmarkS3RawPutBlobs's passes alternately against one server and
// reports both rates and their ratio, measured at the same moments.
func BenchmarkS3SinkVsRawPutBlobs(b *testing.B) {
	srv := s3test.Start(b)
	client := benchRawClient(b, srv)
	for _, c := range benchBlobCases() {
		blobs := benchBlobs(c)
		b.Run(c.name, func(b *testing.B) {
			sinkSec, rawSec := benchInterleave(b, srv, sinkBlobsPass(b, srv, c, blobs), rawBlobsPass(client, c, blobs))
			mb := float64(b.N*c.count*c.size) / 1e6
			b.ReportMetric(mb/sinkSec, "sink-MB/s")
			b.ReportMetric(mb/rawSec, "raw-MB/s")
			b.ReportMetric(rawSec/sinkSec, "sink/raw")
		})
	}
}
