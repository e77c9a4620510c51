package doctor

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/replicate"
)

// want is a verdict and words its detail must hold, so a check cannot
// pass or fail for another reason than the case's.
type want struct {
	status Status
	says   string
}

func (w want) check(t *testing.T, got Result) {
	t.Helper()
	if got.Status != w.status || !strings.Contains(got.Detail, w.says) {
		t.Errorf("%s: %s %q, want %s saying %q", got.Check, got.Status, got.Detail, w.status, w.says)
	}
	if got.Status != Pass && got.Fix == "" && got.Check != "clock nats" {
		t.Errorf("%s: %s without a fix", got.Check, got.Status)
	}
}

func TestJudgeConnection(t *testing.T) {
	for name, c := range map[string]struct {
		f    connFacts
		want want
	}{
		"refused":           {connFacts{err: errors.New("dial tcp 127.0.0.1:1: connection refused")}, want{Fail, "connection refused"}},
		"no stream":         {connFacts{err: fmt.Errorf("open: %w", jetstream.ErrStreamNotFound)}, want{Fail, "stream not found"}},
		"plain over a LAN":  {connFacts{url: "nats://10.0.0.5:4222", server: "n1", version: "2.15.2"}, want{Warn, "plain text over the network"}},
		"plain on loopback": {connFacts{url: "nats://127.0.0.1:4222", loopback: true}, want{Pass, "plain text"}},
		"tls":               {connFacts{url: "tls://nats:4222", tls: true}, want{Pass, "TLS"}},
	} {
		t.Run(name, func(t *testing.T) { c.want.check(t, judgeConnection(c.f)) })
	}
	if got := judgeConnection(connFacts{err: jetstream.ErrStreamNotFound}); got.Check != "stream" {
		t.Errorf("a missing stream is judged as %q, want the stream's check (the server answered)", got.Check)
	}
}

func TestJudgeReplicas(t *testing.T) {
	peer := func(name string, current, offline bool) *jetstream.PeerInfo {
		return &jetstream.PeerInfo{Name: name, Current: current, Offline: offline, Lag: 7}
	}
	info := func(r int, cl *jetstream.ClusterInfo) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: "S", Replicas: r}, Cluster: cl}
	}
	for name, c := range map[string]struct {
		info      *jetstream.StreamInfo
		clustered bool
		want      want
	}{
		"single server":   {info(1, nil), false, want{Pass, "single server"}},
		"one copy of 3":   {info(1, &jetstream.ClusterInfo{Name: "c", Leader: "n1"}), true, want{Warn, "one copy"}},
		"no leader":       {info(3, &jetstream.ClusterInfo{Name: "c", Replicas: []*jetstream.PeerInfo{peer("n2", true, false)}}), true, want{Fail, "no leader"}},
		"replica offline": {info(3, &jetstream.ClusterInfo{Name: "c", Leader: "n1", Replicas: []*jetstream.PeerInfo{peer("n2", true, false), peer("n3", false, true)}}), true, want{Warn, "n3 offline"}},
		"replica behind":  {info(3, &jetstream.ClusterInfo{Name: "c", Leader: "n1", Replicas: []*jetstream.PeerInfo{peer("n2", false, false), peer("n3", true, false)}}), true, want{Warn, "n2 7 operations behind"}},
		"even":            {info(2, &jetstream.ClusterInfo{Name: "c", Leader: "n1", Replicas: []*jetstream.PeerInfo{peer("n2", true, false)}}), true, want{Warn, "no more lost servers"}},
		"three current":   {info(3, &jetstream.ClusterInfo{Name: "c", Leader: "n1", Replicas: []*jetstream.PeerInfo{peer("n2", true, false), peer("n3", true, false)}}), true, want{Pass, "all current"}},
	} {
		t.Run(name, func(t *testing.T) { c.want.check(t, judgeReplicas(c.info, c.clustered)) })
	}
}

func TestJudgeDuplicates(t *testing.T) {
	want{Warn, "stores its events again"}.check(t, judgeDuplicates(30*time.Second))
	want{Pass, "1h0m0s"}.check(t, judgeDuplicates(time.Hour))
}

func TestJudgeSync(t *testing.T) {
	for name, c := range map[string]struct {
		servers  []serverSync
		replicas int
		want     want
	}{
		"not reported":       {nil, 3, want{Warn, "not reported"}},
		"interval, one copy": {[]serverSync{{server: "n1", policy: "2m0s"}}, 1, want{Fail, "n1 every 2m0s"}},
		"interval, 3 copies": {[]serverSync{{server: "n1", policy: "always"}, {server: "n2", policy: "10s"}}, 3, want{Warn, "n2 every 10s"}},
		"monitor down":       {[]serverSync{{server: "n1", policy: "always"}, {server: "http://n2:8222", err: errors.New("monitor http://n2:8222: refused")}}, 3, want{Warn, "refused"}},
		"always":             {[]serverSync{{server: "n1", policy: "always"}}, 1, want{Pass, "n1"}},
	} {
		t.Run(name, func(t *testing.T) { c.want.check(t, judgeSync(c.servers, c.replicas)) })
	}
}

func TestJudgeConsumer(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	stream := func(cfg jetstream.StreamConfig, first, last uint64, rate float64) *streamFacts {
		cfg.Retention = jetstream.LimitsPolicy
		return &streamFacts{rate: rate, info: &jetstream.StreamInfo{Config: cfg, State: jetstream.StreamState{
			FirstSeq: first, LastSeq: last, Msgs: last - first + 1, Bytes: (last - first + 1) * 1000,
		}}}
	}
	lag := func(floor, last uint64, next time.Time) consumerFacts {
		return consumerFacts{SinkStatus: replicate.SinkStatus{Name: "sink-a", AckFloor: floor, StreamLast: last, Pending: last - floor}, nextTime: next}
	}
	for name, c := range map[string]struct {
		c    consumerFacts
		st   *streamFacts
		want want
	}{
		"caught up": {lag(100, 100, time.Time{}), stream(jetstream.StreamConfig{MaxMsgs: 100}, 1, 100, 50), want{Pass, "ack floor 100 of 100"}},
		"fell out":  {lag(10, 100, time.Time{}), stream(jetstream.StreamConfig{MaxMsgs: 50}, 51, 100, 1), want{Fail, "events 11 to 50 are gone"}},
		// 1,000 events of room left at 1 event/s: 16 minutes.
		"max msgs soon": {lag(1000, 9000, time.Time{}), stream(jetstream.StreamConfig{MaxMsgs: 9000}, 1, 9000, 1), want{Fail, "falls out of retention in 17m"}},
		// 8 h of room at 1 event/s.
		"max msgs today": {lag(1000, 9000, time.Time{}), stream(jetstream.StreamConfig{MaxMsgs: 8000 + 8*3600}, 1, 9000, 1), want{Warn, "in 8h0m"}},
		"max age":        {lag(10, 100, now.Add(-23*time.Hour)), stream(jetstream.StreamConfig{MaxAge: 24 * time.Hour}, 1, 100, 0.001), want{Warn, "in 1h0m0s (max age 24h0m0s)"}},
		"max bytes": {lag(0, 100, time.Time{}), stream(jetstream.StreamConfig{MaxBytes: 200_000}, 1, 100, 1),
			want{Fail, "in 2m0s (max 195.3 KiB)"}}, // 100 KB of room at 1 KB/s
		"no limits":    {lag(10, 100, now.Add(-23*time.Hour)), stream(jetstream.StreamConfig{}, 1, 100, 1), want{Pass, "pending 90"}},
		"dead letters": {consumerFacts{SinkStatus: replicate.SinkStatus{Name: "sink-a", DeadLetters: 3}}, stream(jetstream.StreamConfig{}, 1, 100, 1), want{Warn, "3 dead letters"}},
		"last error":   {consumerFacts{SinkStatus: replicate.SinkStatus{Name: "sink-a", LastError: "disk full", LastErrorAt: "then"}}, stream(jetstream.StreamConfig{}, 1, 100, 1), want{Warn, "disk full"}},
	} {
		t.Run(name, func(t *testing.T) { c.want.check(t, judgeConsumer(c.c, c.st, now)) })
	}
}

func TestJudgeClock(t *testing.T) {
	before := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	after := before.Add(10 * time.Millisecond)
	want{Pass, "within 1s"}.check(t, judgeClock("clock nats", before.Add(300*time.Millisecond), before, after))
	want{Warn, "-5.005s off"}.check(t, judgeClock("clock nats", before.Add(-5*time.Second), before, after))
	want{Fail, "2m0.005s off"}.check(t, judgeClock("clock nats", before.Add(2*time.Minute+10*time.Millisecond), before, after))
	// A slow round trip widens what counts as in step.
	want{Pass, "within 3s"}.check(t, judgeClock("clock nats", before.Add(2*time.Second), before, before.Add(3*time.Second)))
}

func TestJudgePostgres(t *testing.T) {
	base := pgFacts{walLevel: "logical", replication: true, role: "tail", db: "prod", keepMB: 1024, slotName: "specstar_replicator_prod"}
	with := func(f func(*pgFacts)) pgFacts { g := base; f(&g); return g }
	slot := func(s slotFacts) func(*pgFacts) { return func(f *pgFacts) { f.slot = &s } }
	for name, c := range map[string]struct {
		judge func(pgFacts) Result
		f     pgFacts
		want  want
	}{
		"wal logical":         {judgeWalLevel, base, want{Pass, "logical"}},
		"wal replica":         {judgeWalLevel, with(func(f *pgFacts) { f.walLevel = "replica" }), want{Warn, "needs logical"}},
		"wal replica, a slot": {judgeWalLevel, with(func(f *pgFacts) { f.walLevel = "replica"; slot(slotFacts{database: "prod"})(f) }), want{Fail, "cannot decode"}},
		"no replication":      {judgeReplication, with(func(f *pgFacts) { f.replication = false }), want{Warn, "lacks the REPLICATION"}},
		"replication":         {judgeReplication, base, want{Pass, "may replicate"}},
		"no slot yet":         {judgeSlot, base, want{Pass, "none yet"}},
		"another database":    {judgeSlot, with(slot(slotFacts{database: "staging", active: true})), want{Fail, `belongs to database "staging"`}},
		"lost":                {judgeSlot, with(slot(slotFacts{database: "prod", walStatus: "lost"})), want{Fail, "lost WAL"}},
		"unreserved":          {judgeSlot, with(slot(slotFacts{database: "prod", walStatus: "unreserved", retained: 2 << 30})), want{Fail, "past max_slot_wal_keep_size"}},
		"inactive":            {judgeSlot, with(slot(slotFacts{database: "prod", walStatus: "reserved", retained: 5 << 20})), want{Warn, "no tail follows it: it retains 5.0 MiB"}},
		"near its limit":      {judgeSlot, with(slot(slotFacts{database: "prod", active: true, walStatus: "extended", retained: 900 << 20})), want{Warn, "retains 900.0 MiB of the 1.0 GiB"}},
		"followed":            {judgeSlot, with(slot(slotFacts{database: "prod", active: true, pid: 42, walStatus: "reserved", retained: 1 << 20})), want{Pass, "followed (pid 42)"}},
		"followed, unlimited": {judgeSlot, with(func(f *pgFacts) {
			f.keepMB = -1
			slot(slotFacts{database: "prod", active: true, walStatus: "reserved"})(f)
		}), want{Pass, "unlimited"}},
	} {
		t.Run(name, func(t *testing.T) { c.want.check(t, c.judge(c.f)) })
	}
}

func TestJudgeDisk(t *testing.T) {
	const gib = 1 << 30
	for name, c := range map[string]struct {
		f    diskFacts
		want want
	}{
		"room":          {diskFacts{dir: "/m", free: 50 * gib, total: 100 * gib, freeFiles: 1e6, totalFiles: 2e6, needBytes: gib, needEntries: 1e5}, want{Pass, "50.0 GiB free"}},
		"does not fit":  {diskFacts{dir: "/m", free: gib, total: 100 * gib, freeFiles: 1e6, totalFiles: 2e6, needBytes: 2 * gib}, want{Fail, "does not fit"}},
		"inodes":        {diskFacts{dir: "/m", free: 50 * gib, total: 100 * gib, freeFiles: 10, totalFiles: 2e6, needEntries: 1000}, want{Fail, "too few inodes"}},
		"low space":     {diskFacts{dir: "/m", free: 5 * gib, total: 100 * gib, freeFiles: 1e6, totalFiles: 2e6}, want{Warn, "under 10% free"}},
		"low inodes":    {diskFacts{dir: "/m", free: 50 * gib, total: 100 * gib, freeFiles: 1e5, totalFiles: 2e6}, want{Warn, "under 10% of the inodes"}},
		"no inode data": {diskFacts{dir: "/m", free: 50 * gib, total: 100 * gib, needEntries: 1000}, want{Pass, "50.0 GiB free"}},
	} {
		t.Run(name, func(t *testing.T) { c.want.check(t, judgeDisk("disk /m", c.f)) })
	}
}
