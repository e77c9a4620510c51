// Package doctor checks a deployment end to end, the way `brew doctor`
// and `flutter doctor` do: each check gathers facts from a real component
// (the NATS servers, the stream and its consumers, a Postgres source, the
// sinks) and judges them pass, warn or fail, with the fix. `replicator
// doctor` prints the Report; an embedding program can run Check itself.
//
// Gathering and judging are apart: the judges are plain functions of the
// facts, so each can be shown to fail for its reason without breaking a
// server.
package doctor

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// Status is a check's verdict.
type Status string

const (
	// Pass: nothing to do.
	Pass Status = "pass"
	// Warn: works now, but a fault or growth would cost data or time.
	Warn Status = "warn"
	// Fail: broken now, or acknowledged data is at risk.
	Fail Status = "fail"
)

// Result is one check's verdict, what it saw and, unless it passed, what
// to do.
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func pass(check, format string, args ...any) Result {
	return Result{Check: check, Status: Pass, Detail: fmt.Sprintf(format, args...)}
}

func warn(check, fix, format string, args ...any) Result {
	return Result{Check: check, Status: Warn, Detail: fmt.Sprintf(format, args...), Fix: fix}
}

func fail(check, fix, format string, args ...any) Result {
	return Result{Check: check, Status: Fail, Detail: fmt.Sprintf(format, args...), Fix: fix}
}

// Report is every check's Result, in the order they ran.
type Report struct {
	Results []Result `json:"checks"`
}

// Failed reports whether any check failed: `replicator doctor` exits 1.
func (r *Report) Failed() bool { return r.count(Fail) > 0 }

// Counts are the number of results of each status.
func (r *Report) Counts() (passed, warned, failed int) {
	return r.count(Pass), r.count(Warn), r.count(Fail)
}

func (r *Report) count(s Status) int {
	n := 0
	for _, res := range r.Results {
		if res.Status == s {
			n++
		}
	}
	return n
}

func (r *Report) add(res ...Result) { r.Results = append(r.Results, res...) }

// Sink is a sink to check: how to reach it and what its consumer is.
type Sink struct {
	// Name is the sink as messages show it (no password).
	Name string
	// Consumer is its durable consumer's name on the stream.
	Consumer string
	// DiskRoot is a disk sink's directory ("" for other kinds).
	DiskRoot string
	// Open opens it for reading (no lease taken, nothing written).
	Open func(ctx context.Context) (sink.Sink, error)
}

// Options are what Check looks at; a zero field skips its checks.
type Options struct {
	// Bus is the connection to the stream; nil when it could not be
	// opened, and BusErr says why.
	Bus    *stream.Bus
	BusErr error
	// Monitor are the NATS servers' monitoring endpoints
	// (http://host:8222), where their fsync policy is read.
	Monitor []string
	// Source is a Postgres source's DSN; Slot its replication slot (""
	// for the one `writer tail` picks in that database).
	Source, Slot string
	// Sinks are the sinks to check.
	Sinks []Sink
	// HTTP fetches Monitor (nil: a client with a 5 s timeout).
	HTTP *http.Client
	// Now is the local clock (nil: time.Now).
	Now func() time.Time
}

// Check runs every check Options allow and returns their Results; it
// fails only through the Report, never with an error.
func Check(ctx context.Context, o Options) *Report {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 5 * time.Second}
	}
	r := &Report{}
	var st *streamFacts
	if o.BusErr != nil || o.Bus == nil {
		r.add(judgeConnection(connFacts{err: o.BusErr}))
	} else {
		var res []Result
		st, res = checkBus(ctx, o)
		r.add(res...)
	}
	if o.Source != "" {
		r.add(checkPostgres(ctx, o)...)
	}
	for _, s := range o.Sinks {
		r.add(checkSink(ctx, s, st)...)
	}
	return r
}
