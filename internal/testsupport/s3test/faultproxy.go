package s3test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultProxy is a reverse proxy in front of an S3 server that fails
// requests on demand, so tests can show that a client retries throttling,
// 5xx answers and outages to success. Bodies are streamed both ways,
// never held whole.
type FaultProxy struct {
	URL string // http://127.0.0.1:PORT: point the client here

	srv      *http.Server
	ln       net.Listener
	requests atomic.Int64
	injected atomic.Int64
	down     atomic.Bool
	noINM    atomic.Bool
	readOnly atomic.Bool

	mu       sync.Mutex
	fraction float64
	rng      *rand.Rand
	methods  map[string]int64
	own      map[string]int64 // methods of requests for the replicator's own state
}

// NewFaultProxy starts a proxy on a free loopback port forwarding to
// target (an endpoint URL such as Server.Endpoint); it stops when the test
// ends. The Host header is passed through unchanged, so SigV4 signatures
// made for the proxy's address verify at the server.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		t.Fatalf("s3test: fault proxy target %q is not a URL: %v", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("s3test: fault proxy listen: %v", err)
	}
	p := &FaultProxy{
		URL:     "http://" + ln.Addr().String(),
		ln:      ln,
		rng:     rand.New(rand.NewPCG(1, 2)), // deterministic
		methods: map[string]int64{},
		own:     map[string]int64{},
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 256
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // keep the signed Host
		},
		Transport:     transport,
		FlushInterval: -1, // stream responses as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeS3Error(w, http.StatusBadGateway, "BadGateway", "fault proxy: "+err.Error())
		},
	}
	p.srv = &http.Server{
		Handler:           p.handler(rp),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = p.srv.Close()
		transport.CloseIdleConnections()
	})
	return p
}

// Fail503 makes the proxy answer the given fraction (0..1) of requests
// with S3's 503 SlowDown error instead of forwarding them. The choice is
// drawn from a fixed-seed RNG, so a test run is reproducible up to the
// order in which concurrent requests arrive.
func (p *FaultProxy) Fail503(fraction float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fraction = fraction
}

// Down takes the "server" away (true) or brings it back (false). While
// down, the proxy closes each request's connection without an answer, as
// a crashed server or a cut network does; clients see a connection error
// (not an HTTP status) and must retry.
func (p *FaultProxy) Down(down bool) { p.down.Store(down) }

// RejectIfNoneMatch makes the proxy answer every request carrying an
// If-None-Match header with 501 NotImplemented, as S3-compatible servers
// without conditional writes do, so the fallback to HEAD-then-PUT can be
// tested.
func (p *FaultProxy) RejectIfNoneMatch(reject bool) { p.noINM.Store(reject) }

// ReadOnly makes the proxy answer every write (PUT, POST, DELETE) with
// 403 AccessDenied, as S3 answers credentials whose policy grants reads
// only.
func (p *FaultProxy) ReadOnly(readOnly bool) { p.readOnly.Store(readOnly) }

// Count counts the requests of one HTTP method (PUT, GET, HEAD, POST,
// DELETE) that reached the proxy, injected failures included, so a test
// can assert that a replay wrote nothing.
func (p *FaultProxy) Count(method string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.methods[method]
}

// CountData is Count without the requests for the replicator's own state
// (its leases and marks below .specstar-replicator/): a writer renews its
// lease while it works, and a replay that writes no data still does.
func (p *FaultProxy) CountData(method string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.methods[method] - p.own[method]
}

// Requests counts the requests that reached the proxy, injected failures
// included.
func (p *FaultProxy) Requests() int64 { return p.requests.Load() }

// Injected counts the requests the proxy failed on purpose (503s and
// closed connections).
func (p *FaultProxy) Injected() int64 { return p.injected.Load() }

func (p *FaultProxy) fail() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fraction > 0 && p.rng.Float64() < p.fraction
}

func (p *FaultProxy) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		p.mu.Lock()
		p.methods[r.Method]++
		if strings.Contains(r.URL.Path, "/.specstar-replicator/") {
			p.own[r.Method]++
		}
		p.mu.Unlock()
		if p.down.Load() {
			p.injected.Add(1)
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			writeS3Error(w, http.StatusServiceUnavailable, "ServiceUnavailable", "fault proxy: down")
			return
		}
		if p.noINM.Load() && r.Header.Get("If-None-Match") != "" {
			p.injected.Add(1)
			if !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
				_, _ = io.Copy(io.Discard, r.Body)
			}
			writeS3Error(w, http.StatusNotImplemented, "NotImplemented", "A header you provided implies functionality that is not implemented.")
			return
		}
		if p.readOnly.Load() && (r.Method == http.MethodPut || r.Method == http.MethodPost || r.Method == http.MethodDelete) {
			p.injected.Add(1)
			if !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
				_, _ = io.Copy(io.Discard, r.Body)
			}
			writeS3Error(w, http.StatusForbidden, "AccessDenied", "Access Denied")
			return
		}
		if p.fail() {
			p.injected.Add(1)
			if !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
				// Read the body the client is sending (streamed, not kept),
				// so that it gets the answer rather than a reset connection.
				_, _ = io.Copy(io.Discard, r.Body)
			}
			writeS3Error(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeS3Error answers as S3 does: an XML Error document.
func writeS3Error(w http.ResponseWriter, status int, code, msg string) {
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><RequestId>faultproxy</RequestId><HostId>faultproxy</HostId></Error>`,
		xmlEscape(code), xmlEscape(msg))
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Header().Set("X-Amz-Request-Id", "faultproxy")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func xmlEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
