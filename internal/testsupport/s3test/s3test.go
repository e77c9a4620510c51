// Package s3test runs a throwaway S3 server (versitygw with its posix
// backend) for tests that need real S3 semantics: conditional writes,
// multipart uploads, listings, errors.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
)

// InstallHint is how to get the server binary, quoted when it is missing.
const InstallHint = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// DefaultContentType is the Content-Type the server answers for an object
// stored without one (AWS S3 answers binary/octet-stream), which is what
// SpecStar reads back for a blob it stored untyped.
const DefaultContentType = "application/octet-stream"

// Server is a running versitygw, so that tests talk to a real S3 API.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string // root access key of this server
	SecretKey string // root secret key of this server
	Region    string // always "us-east-1"
	DataDir   string // the posix backend's root: one directory per bucket

	bin     string
	addr    string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a versitygw on a free loopback port with its data in a
// temporary directory and stops it when the test ends. It fails the test
// (never skips) when the binary cannot be found or the server does not
// come up.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := findBinary()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	s := &Server{
		AccessKey: "s3test" + randHex(6),
		SecretKey: randHex(20),
		Region:    "us-east-1",
		DataDir:   filepath.Join(tmp, "data"),
		bin:       bin,
		logPath:   filepath.Join(tmp, "versitygw.log"),
	}
	if err := os.Mkdir(s.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	var lastErr error
	for range 5 { // the free port may be taken between probe and bind
		port := freeport.Take(t)
		s.addr = fmt.Sprintf("127.0.0.1:%d", port)
		s.Endpoint = "http://" + s.addr
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("s3test: start versitygw: %v", lastErr)
	return nil
}

// findBinary looks for versitygw where a developer or CI put it.
func findBinary() (string, error) {
	var tried []string
	if p := os.Getenv("VERSITYGW"); p != "" {
		if isExecutable(p) {
			return p, nil
		}
		tried = append(tried, "$VERSITYGW="+p)
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	tried = append(tried, "PATH")
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "versitygw")
			if isExecutable(p) {
				return p, nil
			}
			tried = append(tried, p)
		}
	}
	const fallback = "/root/go/bin/versitygw"
	if isExecutable(fallback) {
		return fallback, nil
	}
	tried = append(tried, fallback)
	return "", fmt.Errorf("s3test: S3 tests need the versitygw binary (looked in %s); install it with: %s",
		strings.Join(tried, ", "), InstallHint)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// start launches the process and waits until it answers HTTP.
func (s *Server) start() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin,
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--port", s.addr, "--region", s.Region, "--quiet",
		"posix", s.DataDir)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Dies with the test binary, also when go test's timeout kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("run %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	client := &http.Client{Timeout: time.Second}
	wait := waitfor.Scaled(15 * time.Second) // a loaded machine starts it slowly
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("versitygw on %s exited: %s", s.addr, s.logTail())
		default:
		}
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil // any answer (403 without credentials) means it serves
		}
		time.Sleep(25 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("versitygw on %s did not answer within %s: %s", s.addr, wait, s.logTail())
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return "(no output)"
	}
	return string(b)
}

// Stop stops the server (SIGTERM, then SIGKILL after 5 s); its data stays
// for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts a stopped server again on the same port with the same
// data, so a test can take S3 away for a while and bring it back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for range 50 { // the port can linger briefly after the old process
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("s3test: restart versitygw on %s: %v", s.addr, err)
}

// Env is the environment a subprocess needs to reach this server with the
// default AWS credential chain (the endpoint still has to be given).
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// Credentials are this server's static credentials, for aws.Config values
// built by hand.
func (s *Server) Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, "")
}

// Client is an S3 client for this server (path style, static credentials,
// up to 10 attempts per request).
func (s *Server) Client(t testing.TB) *s3.Client {
	return s.ClientAt(t, s.Endpoint)
}

// ClientAt is Client talking to another endpoint, such as a FaultProxy in
// front of this server.
func (s *Server) ClientAt(t testing.TB, endpoint string) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       s.Region,
		UsePathStyle: true,
		Credentials:  s.Credentials(),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 10
			o.MaxBackoff = 200 * time.Millisecond
			o.RateLimiter = ratelimit.None
		}),
	})
}

// CreateBucket creates a bucket on this server, failing the test if it
// cannot.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	if err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
}

// Running reports whether the server process is up (nil) or why not.
func (s *Server) Running() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("s3test: server stopped")
	}
	select {
	case <-s.done:
		return fmt.Errorf("s3test: versitygw exited: %s", s.logTail())
	default:
		return nil
	}
}
