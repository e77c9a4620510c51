package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

func put(t *testing.T, c *s3.Client, bucket, key string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body),
	}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, c *s3.Client, bucket, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func TestServerPutGetRestart(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "bucket-1")
	c := s.Client(t)
	put(t, c, "bucket-1", "a/b/c", []byte("hello"))
	if got := get(t, c, "bucket-1", "a/b/c"); string(got) != "hello" {
		t.Fatalf("got %q, want hello", got)
	}

	s.Stop()
	if s.Running() == nil {
		t.Fatal("Running() = nil after Stop")
	}
	s.Restart(t)
	if got := get(t, c, "bucket-1", "a/b/c"); string(got) != "hello" {
		t.Fatalf("after restart got %q, want hello", got)
	}
	if len(s.Env()) < 3 {
		t.Fatalf("Env() = %v", s.Env())
	}
}

func TestFaultProxy503sAreRetried(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "bucket-2")
	p := NewFaultProxy(t, s.Endpoint)
	p.Fail503(0.5)
	c := s.ClientAt(t, p.URL)
	big := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB: 100-continue path
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		body := []byte(key)
		if i%5 == 0 {
			body = big
		}
		put(t, c, "bucket-2", key, body)
		if got := get(t, c, "bucket-2", key); !bytes.Equal(got, body) {
			t.Fatalf("%s: got %d bytes, want %d", key, len(got), len(body))
		}
	}
	if p.Injected() == 0 {
		t.Fatal("no failure injected at 50%")
	}
	if p.Requests() < 40+p.Injected() {
		t.Fatalf("requests %d < 40 + injected %d", p.Requests(), p.Injected())
	}

	// A client that does not retry sees the SlowDown error itself.
	p.Fail503(1)
	one := s3.New(s3.Options{
		BaseEndpoint: aws.String(p.URL), Region: s.Region, UsePathStyle: true,
		Credentials: s.Credentials(), RetryMaxAttempts: 1,
	})
	_, err := one.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("bucket-2"), Key: aws.String("k1")})
	var re interface{ HTTPStatusCode() int }
	if !errors.As(err, &re) || re.HTTPStatusCode() != 503 {
		t.Fatalf("HEAD through a failing proxy: %v, want HTTP 503", err)
	}
	_, err = one.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("bucket-2"), Key: aws.String("k1")})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "SlowDown" {
		t.Fatalf("GET through a failing proxy: %v, want SlowDown", err)
	}
}

func TestFaultProxyDown(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "bucket-3")
	p := NewFaultProxy(t, s.Endpoint)
	c := s.ClientAt(t, p.URL)
	put(t, c, "bucket-3", "k", []byte("v"))
	p.Down(true)
	go func() {
		time.Sleep(300 * time.Millisecond)
		p.Down(false)
	}()
	if got := get(t, c, "bucket-3", "k"); string(got) != "v" {
		t.Fatalf("got %q", got)
	}
	if p.Injected() == 0 {
		t.Fatal("no request failed while down")
	}
}
