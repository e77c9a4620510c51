package sinktest

// The replicas part: one archive replayed with many batch sizes,
// parallelisms and lane orders must leave one store.

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/internal/sinktestutil"
)

// replicas (issue 33, item 4): replicas of one stream must hold the same
// bytes whatever the batch size and the parallelism a worker applied it
// with, uid conflicts included: of two resources whose revisions share a
// uid, the first in stream order keeps it and the later one is refused
// (dead-lettered) naming both, as a later revision of the same resource
// reusing its own uid (a migration) is not. The stream is applied as
// replicate.Worker applies it: in batches, each batch's sink.Lanes in
// parallel, each lane in order, then Flush (or, for a sink.Overlapper,
// Seal and FlushSealed while the next batch is applied). Lanes are
// independent, so they are also started in reverse: without an order
// between two holders of one uid, the later would then go first.
func (s *suite) replicas(t *testing.T) {
	recs := s.replicaStream(t)
	type replay struct {
		batch, parallel int
		reversed        bool // lanes started last first
	}
	ref := replay{1, 1, false}
	replays := []replay{ref, {2, 4, false}, {3, 16, false}, {7, 2, false}, {len(recs), 1, false}, {len(recs), 16, false},
		{len(recs), 1, true}, {5, 2, true}}
	var refDump string
	var refDead map[string]string
	for _, r := range replays {
		name := fmt.Sprintf("batch=%d/parallel=%d", r.batch, r.parallel)
		if r.reversed {
			name += "/lanes=reversed"
		}
		t.Run(name, func(t *testing.T) {
			snk := s.b.Open(t)
			dead := replayInto(t, snk, recs, r.batch, r.parallel, r.reversed)
			s.checkReplicaDead(t, dead)
			dump := s.dump(t, snk, recs)
			if r == ref {
				refDump, refDead = dump, dead
				s.checkReplicaHolders(t, snk)
				return
			}
			if refDump == "" {
				t.Fatal("the reference replay failed")
			}
			if !reflect.DeepEqual(dead, refDead) {
				t.Errorf("dead letters %q, the replay with batch=1, parallel=1 gave %q", slices.Sorted(maps.Keys(dead)), slices.Sorted(maps.Keys(refDead)))
			}
			if dump != refDump {
				t.Errorf("the store differs from the one the replay with batch=1, parallel=1 left:\n%s", diffLines(refDump, dump))
			}
		})
	}
}

// replicaUIDs are the uids two resources share in replicaStream.
const (
	replicaUID  = "dddddddd-0000-4000-8000-000000000033"
	replicaUID2 = "dddddddd-0000-4000-8000-000000000034"
)

// replicaStream is small.acbak with two uid conflicts woven in: victim
// then evil (newer, so that newer-wins would pick it), and alpha then
// beta (older); victim's revision is migrated later, keeping its uid.
func (s *suite) replicaStream(t *testing.T) []record {
	t.Helper()
	base := s.archives["small.acbak"]
	rev := func(rid, uid, updated string, sv, parentSV events.Opt[string], payload string) record {
		return record{Model: "issue", Rev: sinktestutil.Revision(t, rid, rid+":1", uid, sv, parentSV, updated, payload)}
	}
	meta := func(rid, updated string) record {
		return record{Model: "issue", Meta: sinktestutil.Meta(t, rid, updated, 1, "alice")}
	}
	none := events.Null[string]()
	third, half := len(base)/3, 2*len(base)/3
	var recs []record
	recs = append(recs, base[:2]...)
	recs = append(recs, meta("victim", "2024-05-01T00:00:00Z"), rev("victim", replicaUID, "2024-05-01T00:00:00Z", none, events.Opt[string]{}, `{"who":"victim"}`))
	recs = append(recs, rev("alpha", replicaUID2, "2024-07-01T00:00:00Z", none, events.Opt[string]{}, `{"who":"alpha"}`))
	recs = append(recs, base[2:third]...)
	recs = append(recs, meta("evil", "2024-06-01T00:00:00Z"), rev("evil", replicaUID, "2024-06-01T00:00:00Z", none, events.Opt[string]{}, `{"who":"evil"}`))
	recs = append(recs, base[third:half]...)
	recs = append(recs, rev("beta", replicaUID2, "2024-05-01T00:00:00Z", none, events.Opt[string]{}, `{"who":"beta"}`))
	recs = append(recs, rev("victim", replicaUID, "2024-05-02T00:00:00Z", events.Some("v2"), none, `{"who":"victim","v":2}`))
	recs = append(recs, base[half:]...)
	return recs
}

// checkReplicaDead checks that exactly the later holders of each uid
// were refused, each naming both resources.
func (s *suite) checkReplicaDead(t *testing.T, dead map[string]string) {
	t.Helper()
	want := map[string][2]string{}
	if s.b.Revisions {
		want[deadKey("evil", "evil:1", replicaUID)] = [2]string{"victim", "evil"}
		want[deadKey("beta", "beta:1", replicaUID2)] = [2]string{"alpha", "beta"}
	}
	for k, reason := range dead {
		names, ok := want[k]
		if !ok {
			t.Errorf("%s refused: %s", k, reason)
			continue
		}
		if !strings.Contains(reason, `"`+names[0]+`"`) || !strings.Contains(reason, `"`+names[1]+`"`) {
			t.Errorf("the refusal of %s, %q, must name both resource ids", k, reason)
		}
	}
	for k := range want {
		if _, ok := dead[k]; !ok {
			t.Errorf("%s was not refused: its uid was held by a resource earlier on the stream", k)
		}
	}
}

// checkReplicaHolders checks that the first holders of the shared uids
// read back and the refused revisions do not.
func (s *suite) checkReplicaHolders(t *testing.T, snk sink.Sink) {
	t.Helper()
	if !s.b.Revisions {
		return
	}
	rd := reader(t, snk)
	for _, h := range []struct{ rid, payload string }{{"victim", `{"who":"victim","v":2}`}, {"alpha", `{"who":"alpha"}`}} {
		info, data, err := rd.Revision(ctx, "issue", h.rid, h.rid+":1", events.Null[string]())
		if err != nil || info.ResourceID != h.rid || string(data) != h.payload {
			t.Errorf("%s's revision reads back as %+v, %q, %v; want its own, %s", h.rid, info, data, err, h.payload)
		}
	}
	for _, rid := range []string{"evil", "beta"} {
		if _, _, err := rd.Revision(ctx, "issue", rid, rid+":1", events.Null[string]()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the refused revision of %s reads back as %v, want fs.ErrNotExist", rid, err)
		}
	}
}

// deadKey names a refused revision.
func deadKey(rid, revID, uid string) string {
	return fmt.Sprintf("revision %q %q (uid %s)", rid, revID, uid)
}

// laneKey is what orders r in its batch, as the worker orders an event.
func laneKey(r record) sink.LaneKey {
	switch {
	case r.Meta != nil:
		return sink.LaneKey{Resource: "r\x00" + r.Model + "\x00" + r.Meta.ResourceID}
	case r.Rev != nil:
		return sink.LaneKey{Resource: "r\x00" + r.Model + "\x00" + r.Rev.Info.ResourceID, UID: r.Rev.Info.UID}
	default:
		return sink.LaneKey{Resource: "b\x00" + r.Blob.FileID}
	}
}

// replayInto applies recs to snk as a worker with this batch size and
// parallelism would (starting a batch's lanes last first if reversed),
// and returns what was refused (deadKey -> reason):
// Invalid errors at Apply, and a sink.Refuser's refusals at Flush. Any
// other error fails the test.
func replayInto(t *testing.T, snk sink.Sink, recs []record, batch, parallel int, reversed bool) map[string]string {
	t.Helper()
	dead := map[string]string{}
	var mu sync.Mutex
	take := func() {
		r, ok := snk.(sink.Refuser)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, f := range r.TakeRefusals() {
			dead[deadKey(f.ResourceID, f.RevisionID, f.UID)] = f.Err.Error()
		}
	}
	o, overlap := snk.(sink.Overlapper)
	overlap = overlap && o.OverlapsFlush()
	var prev chan error // the previous batch's FlushSealed
	wait := func() {
		if prev == nil {
			return
		}
		if err := <-prev; err != nil {
			t.Fatalf("flush sealed: %v", err)
		}
		prev = nil
		take()
	}
	for start := 0; start < len(recs); start += batch {
		b := recs[start:min(start+batch, len(recs))]
		keys := make([]sink.LaneKey, len(b))
		for i, r := range b {
			keys[i] = laneKey(r)
		}
		errs := make([]error, len(b))
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		lanes := sink.Lanes(keys)
		if reversed {
			slices.Reverse(lanes)
		}
		for _, lane := range lanes {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				for _, i := range lane {
					_, errs[i] = applyOne(snk, b[i])
				}
			}()
		}
		wg.Wait()
		for i, err := range errs {
			switch {
			case err == nil:
			case sink.IsInvalid(err) && b[i].Rev != nil:
				in := b[i].Rev.Info
				dead[deadKey(in.ResourceID, in.RevisionID, in.UID)] = err.Error()
			default:
				t.Fatalf("apply %s: %v", describe(b[i]), err)
			}
		}
		if !overlap {
			flush(t, snk)
			take()
			continue
		}
		wait()
		o.Seal()
		prev = make(chan error, 1)
		go func(done chan<- error) { done <- o.FlushSealed(ctx) }(prev)
	}
	wait()
	flush(t, snk)
	take()
	return dead
}

// dump is the backend's Dump of snk, or what its read side shows of the
// keys of recs.
func (s *suite) dump(t *testing.T, snk sink.Sink, recs []record) string {
	t.Helper()
	if s.b.Dump != nil {
		return s.b.Dump(t, snk)
	}
	var b strings.Builder
	l := listing(t, snk)
	for _, m := range slices.Sorted(maps.Keys(l)) {
		fmt.Fprintf(&b, "list %q: %q\n", m, l[m])
	}
	rd := reader(t, snk)
	seen := map[string]bool{}
	for _, r := range recs {
		k := key(r)
		if seen[k] {
			continue
		}
		seen[k] = true
		got, err := readRaw(rd, r)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(&b, "%q: missing\n", k)
		case err != nil:
			t.Fatalf("read back %s: %v", describe(r), err)
		case got.bin != nil:
			fmt.Fprintf(&b, "%q: %+v %x\n", k, *got.bin, got.data)
		default:
			fmt.Fprintf(&b, "%q: %x\n", k, got.raw)
		}
	}
	return b.String()
}

// diffLines shows the lines of two dumps that are in one only (at most
// 20 of each).
func diffLines(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, side := range []struct {
		sign  string
		lines string
		other map[string]bool
	}{{"-", want, g}, {"+", got, w}} {
		n := 0
		for _, l := range strings.Split(side.lines, "\n") {
			if side.other[l] {
				continue
			}
			if n++; n <= 20 {
				if len(l) > 300 {
					l = l[:300] + "…"
				}
				b.WriteString(side.sign + " " + l + "\n")
			}
		}
		if n > 20 {
			fmt.Fprintf(&b, "%s ... %d lines in all\n", side.sign, n)
		}
	}
	return b.String()
}
