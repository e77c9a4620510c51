package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/stream"
)

// connFacts are what the connection to NATS showed.
type connFacts struct {
	err              error
	url              string
	server, version  string
	tls, loopback    bool
	discoveredServer int // servers of the cluster the client learned of
}

// judgeConnection: reachable, credentials and TLS accepted, and not plain
// text over a network.
func judgeConnection(f connFacts) Result {
	if errors.Is(f.err, jetstream.ErrStreamNotFound) {
		return fail("stream", "start a writer or `replicator run`: either creates it (or replicator stream apply)", "%v", f.err)
	}
	if f.err != nil {
		return fail("nats", "check --nats (or the config's nats.url), the credentials (--nats-creds, --nats-nkey) and --tls-ca; `nats --server URL server ping` shows what a server answers", "cannot open the stream: %v", f.err)
	}
	how := "TLS"
	if !f.tls {
		how = "plain text"
		if !f.loopback {
			return warn("nats", "give a tls:// URL (and --tls-ca for a private CA)", "connected to %s (%s, nats-server %s) in plain text over the network: credentials and events can be read on the way", f.url, f.server, f.version)
		}
	}
	return pass("nats", "connected to %s (%s, nats-server %s, %s)", f.url, f.server, f.version, how)
}

// streamFacts are the stream's settings and state, and how fast it grows.
type streamFacts struct {
	info      *jetstream.StreamInfo
	rate      float64 // events per second, recently
	clustered bool
	consumers map[string]consumerFacts
}

// consumerFacts are a sink consumer's status and when the next event it
// needs was stored.
type consumerFacts struct {
	replicate.SinkStatus
	nextTime time.Time // zero when unknown or caught up
}

// checkBus runs the checks of the connection, JetStream, the stream, the
// servers' fsync policy, every consumer and the servers' clock.
func checkBus(ctx context.Context, o Options) (*streamFacts, []Result) {
	bus := o.Bus
	nc := bus.NC
	cf := connFacts{url: stream.RedactURL(bus.URL()), server: nc.ConnectedServerName(), version: nc.ConnectedServerVersion(), discoveredServer: len(nc.Servers())}
	if _, err := nc.TLSConnectionState(); err == nil {
		cf.tls = true
	}
	if u, err := url.Parse(nc.ConnectedUrl()); err == nil {
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			cf.loopback = true
		}
	}
	out := []Result{judgeConnection(cf)}

	ai, err := bus.JS.AccountInfo(ctx)
	if err != nil {
		return nil, append(out, fail("jetstream", "enable JetStream for this account (jetstream { } in the server's configuration, or the account's JetStream limits)", "account info: %v", err))
	}
	domain := ai.Domain
	if domain == "" {
		domain = "(none)"
	}
	out = append(out, pass("jetstream", "domain %s, %d streams, %d consumers, %s stored", domain, ai.Streams, ai.Consumers, progress.Bytes(int64(ai.Store))))

	before := o.Now()
	info, err := bus.Stream.Info(ctx)
	after := o.Now()
	if err != nil {
		return nil, append(out, fail("stream", "create it with `replicator stream apply` (or any writer)", "stream %s info: %v", bus.Config().Stream, err))
	}
	st := &streamFacts{info: info, consumers: map[string]consumerFacts{}}
	st.clustered = info.Cluster != nil && (info.Cluster.Name != "" || len(info.Cluster.Replicas) > 0)
	st.rate = recentRate(ctx, bus.Stream, info.State)
	out = append(out, judgeReplicas(info, st.clustered), judgeDuplicates(info.Config.Duplicates))
	out = append(out, judgeSync(syncFacts(ctx, o), info.Config.Replicas))

	sts, err := replicate.Status(ctx, bus)
	if err != nil {
		out = append(out, fail("consumers", "check the account's rights to read consumer info", "%v", err))
	}
	for _, s := range sts {
		c := consumerFacts{SinkStatus: s}
		next := max(s.AckFloor+1, info.State.FirstSeq)
		if s.Pending > 0 || s.AckPending > 0 {
			if m, err := bus.Stream.GetMsg(ctx, next); err == nil {
				c.nextTime = m.Time
			}
		}
		st.consumers[s.Name] = c
		out = append(out, judgeConsumer(c, st, after))
	}
	out = append(out, judgeClock("clock nats", info.TimeStamp, before, after))
	return st, out
}

// recentRate is how many events per second the stream stored over its
// last thousand events (or all it holds, when those cannot be read).
func recentRate(ctx context.Context, s jetstream.Stream, state jetstream.StreamState) float64 {
	if state.LastSeq <= state.FirstSeq || state.Msgs < 2 {
		return 0
	}
	from, since := state.FirstSeq, state.FirstTime
	if k := uint64(1000); state.LastSeq-state.FirstSeq > k {
		if m, err := s.GetMsg(ctx, state.LastSeq-k); err == nil {
			from, since = state.LastSeq-k, m.Time
		}
	}
	d := state.LastTime.Sub(since).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(state.LastSeq-from) / d
}

// judgeReplicas: a leader, every replica current, and more than one copy
// where there is a cluster to hold them.
func judgeReplicas(info *jetstream.StreamInfo, clustered bool) Result {
	r := info.Config.Replicas
	if clustered && info.Cluster.Leader == "" {
		return fail("replicas", "bring back a majority of the stream's servers", "stream %s has no leader: nothing published is stored", info.Config.Name)
	}
	var behind []string
	if info.Cluster != nil {
		for _, p := range info.Cluster.Replicas {
			switch {
			case p.Offline:
				behind = append(behind, p.Name+" offline")
			case !p.Current:
				behind = append(behind, fmt.Sprintf("%s %d operations behind", p.Name, p.Lag))
			}
		}
	}
	switch {
	case len(behind) > 0:
		return warn("replicas", "bring the servers back (a stream with fewer current replicas than a majority stops storing)", "%d replicas; %s", r, strings.Join(behind, ", "))
	case r == 1 && clustered:
		return warn("replicas", "replicator stream apply --replicas 3", "one copy of every event in cluster %s: losing that server's disk loses acknowledged events", info.Cluster.Name)
	case r > 1 && r%2 == 0:
		return warn("replicas", fmt.Sprintf("replicator stream apply --replicas %d", r+1), "%d replicas tolerate no more lost servers than %d do", r, r-1)
	case r == 1:
		return pass("replicas", "1 replica on a single server (a cluster would hold 3)")
	}
	return pass("replicas", "%d replicas, leader %s, all current", r, info.Cluster.Leader)
}

// minDuplicateWindow is nats-server's default window: below it a writer
// retrying after a short outage stores an event twice.
const minDuplicateWindow = 2 * time.Minute

// judgeDuplicates: the window in which JetStream drops a re-published
// event by its message id.
func judgeDuplicates(window time.Duration) Result {
	if window < minDuplicateWindow {
		return warn("duplicate window", "replicator stream apply --duplicate-window 1h", "%s: a writer re-publishing after a longer outage stores its events again (sinks apply them idempotently, but the stream holds them twice and lag counts them)", window)
	}
	return pass("duplicate window", "%s", window)
}

// serverSync is one server's fsync policy, as reported (or why not).
type serverSync struct {
	server string
	policy string // "always" or an interval
	err    error
}

// syncFacts are the servers' fsync policies: the embedded server's, or
// each monitoring endpoint's /varz.
func syncFacts(ctx context.Context, o Options) []serverSync {
	if p, ok := o.Bus.SyncPolicy(); ok {
		return []serverSync{{server: "embedded", policy: p}}
	}
	var out []serverSync
	for _, m := range o.Monitor {
		out = append(out, varzSync(ctx, o.HTTP, m))
	}
	return out
}

// varzSync reads a server's jetstream.config from its /varz.
func varzSync(ctx context.Context, hc *http.Client, monitor string) serverSync {
	u := strings.TrimSuffix(monitor, "/") + "/varz"
	s := serverSync{server: monitor}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		s.err = fmt.Errorf("monitor %s: %w", monitor, err)
		return s
	}
	resp, err := hc.Do(req)
	if err != nil {
		s.err = fmt.Errorf("monitor %s: %w", monitor, err)
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.err = fmt.Errorf("monitor %s: %s", u, resp.Status)
		return s
	}
	var v struct {
		Name      string `json:"server_name"`
		JetStream struct {
			Config *struct {
				SyncInterval time.Duration `json:"sync_interval"`
				SyncAlways   bool          `json:"sync_always"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		s.err = fmt.Errorf("monitor %s: %w", u, err)
		return s
	}
	if v.Name != "" {
		s.server = v.Name
	}
	switch c := v.JetStream.Config; {
	case c == nil:
		s.err = fmt.Errorf("monitor %s: the server runs no JetStream", u)
	case c.SyncAlways:
		s.policy = "always"
	case c.SyncInterval > 0:
		s.policy = c.SyncInterval.String()
	default:
		s.policy = "2m0s" // nats-server's defaultSyncInterval
	}
	return s
}

const syncFix = "set sync_interval: always in each server's jetstream block (the embedded server's default; replicator/writer --sync-interval for it); see the README on durability"

// judgeSync: an acknowledged event is on disk only where the server
// fsyncs before acknowledging (Jepsen's NATS 2.12.1 analysis).
func judgeSync(servers []serverSync, replicas int) Result {
	if len(servers) == 0 {
		return warn("fsync", "give --monitor http://SERVER:8222 for each server to check it; "+syncFix, "the servers' fsync policy is not reported to clients: with nats-server's default (every 2 minutes) a power cut loses acknowledged events")
	}
	var always, lazy, unknown []string
	for _, s := range servers {
		switch {
		case s.err != nil:
			unknown = append(unknown, s.err.Error())
		case s.policy == "always":
			always = append(always, s.server)
		default:
			lazy = append(lazy, s.server+" every "+s.policy)
		}
	}
	switch {
	case len(lazy) > 0 && replicas < 3:
		return fail("fsync", syncFix, "%s: acknowledged events wait for that flush in the page cache, with %d copies: a power cut loses them", strings.Join(lazy, ", "), replicas)
	case len(lazy) > 0:
		return warn("fsync", syncFix, "%s: a power cut of every server at once loses the acknowledged events not flushed yet", strings.Join(lazy, ", "))
	case len(unknown) > 0:
		return warn("fsync", "make the monitoring endpoints reachable from here; "+syncFix, "%s", strings.Join(unknown, "; "))
	}
	return pass("fsync", "%s: fsync before every acknowledgement", strings.Join(always, ", "))
}

// Retention horizons below which a lagging sink is a warning or a failure.
const (
	horizonWarn = 24 * time.Hour
	horizonFail = time.Hour
)

// judgeConsumer: a sink consumer has every event it needs still in the
// stream, will have at the current rate, and has no dead letters or
// recent error.
func judgeConsumer(c consumerFacts, st *streamFacts, now time.Time) Result {
	name := "consumer " + c.Name
	state := st.info.State
	if c.AckFloor > 0 && c.AckFloor+1 < state.FirstSeq {
		return fail(name, "replicator reconcile --from SOURCE --to SINK publishes what the sink lacks", "the sink has applied up to event %d, but the stream now begins at %d: events %d to %d are gone for it", c.AckFloor, state.FirstSeq, c.AckFloor+1, state.FirstSeq-1)
	}
	var notes []string
	status := Pass
	fix := ""
	if h, why, ok := horizon(c, st, now); ok && h < horizonWarn {
		status = Warn
		if h < horizonFail {
			status = Fail
		}
		fix = "speed the sink up (more --parallel, a faster store) or keep more: replicator stream apply --max-age/--max-bytes"
		notes = append(notes, fmt.Sprintf("at this rate (%.1f events/s) the sink falls out of retention in %s (%s)", st.rate, h.Round(time.Minute), why))
	}
	if c.DeadLetters > 0 {
		status = worse(status, Warn)
		notes = append(notes, fmt.Sprintf("%d dead letters", c.DeadLetters))
		fix = join(fix, "replicator dlq list shows why; after the fix, replicator dlq replay")
	}
	if c.LastError != "" {
		status = worse(status, Warn)
		notes = append(notes, fmt.Sprintf("last error at %s: %s", c.LastErrorAt, c.LastError))
		fix = join(fix, "the run retries it with backoff; its logs say more")
	}
	summary := fmt.Sprintf("pending %d, awaiting ack %d, ack floor %d of %d, redelivered %d", c.Pending, c.AckPending, c.AckFloor, c.StreamLast, c.Redelivered)
	return Result{Check: name, Status: status, Detail: strings.Join(append([]string{summary}, notes...), "; "), Fix: fix}
}

// horizon is how long until the next event a lagging sink needs leaves
// the stream, by the stream's limits at its current rate, and which limit
// that is; ok is false for a sink that is caught up or a stream without
// limits.
func horizon(c consumerFacts, st *streamFacts, now time.Time) (h time.Duration, why string, ok bool) {
	cfg, state := st.info.Config, st.info.State
	behind := c.Pending + uint64(max(c.AckPending, 0))
	if behind == 0 || cfg.Retention != jetstream.LimitsPolicy {
		return 0, "", false
	}
	consider := func(d time.Duration, what string) {
		if !ok || d < h {
			h, why, ok = max(d, 0), what, true
		}
	}
	if cfg.MaxAge > 0 && !c.nextTime.IsZero() {
		consider(cfg.MaxAge-now.Sub(c.nextTime), "max age "+cfg.MaxAge.String())
	}
	if st.rate > 0 && cfg.MaxMsgs > 0 {
		room := float64(cfg.MaxMsgs) - float64(behind)
		consider(time.Duration(room/st.rate*float64(time.Second)), fmt.Sprintf("max %d events", cfg.MaxMsgs))
	}
	if st.rate > 0 && cfg.MaxBytes > 0 && state.Msgs > 0 {
		avg := float64(state.Bytes) / float64(state.Msgs)
		room := float64(cfg.MaxBytes) - avg*float64(behind)
		consider(time.Duration(room/(avg*st.rate)*float64(time.Second)), "max "+progress.Bytes(cfg.MaxBytes))
	}
	return h, why, ok
}

// judgeClock: this host's clock against a server's, read between before
// and after. Point-in-time restore (--at) reads the stream's timestamps.
func judgeClock(check string, server, before, after time.Time) Result {
	if server.IsZero() {
		return warn(check, "", "the server reported no time")
	}
	rtt := after.Sub(before)
	skew := server.Sub(before.Add(rtt / 2))
	abs := skew
	if abs < 0 {
		abs = -abs
	}
	const fix = "synchronize the clocks (chrony or systemd-timesyncd): `replicator restore --at` reads the stream's timestamps"
	switch slack := max(time.Second, rtt); {
	case abs <= slack:
		return pass(check, "within %s of this host", slack)
	case abs <= 30*time.Second:
		return warn(check, fix, "the server's clock is %s off this host's", skew.Round(time.Millisecond))
	}
	return fail(check, fix, "the server's clock is %s off this host's", skew.Round(time.Millisecond))
}

func worse(a, b Status) Status {
	rank := map[Status]int{Pass: 0, Warn: 1, Fail: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
