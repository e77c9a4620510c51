package acbak

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// frameOf is one archive frame: the length prefix, then the record.
func frameOf(t *testing.T, rec events.Record) []byte {
	t.Helper()
	p, err := rec.Encode(events.Msgpack)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...)
}

// firstMeta is the first ResourceMeta of small.acbak.
func firstMeta(t *testing.T) *events.ResourceMeta {
	t.Helper()
	frames, _, err := readAll(t, testfixtures.Read(t, "small.acbak"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if m, ok := f.Record.(*events.MetaRecord); ok {
			meta, err := m.Meta()
			if err != nil {
				t.Fatal(err)
			}
			return meta
		}
	}
	t.Fatal("small.acbak holds no meta")
	return nil
}

// TestVerifyKeepsNoPendingFrames (issue 12, item 10): Verify kept every
// pending meta's whole frame until its current revision appeared, so an
// archive of large metas whose revisions never come took memory in
// proportion to the archive (1.5 GB of 1 MiB metas took 2.2 GB). Here
// 64 metas of 512 KiB lack their revisions: while Verify reports them
// missing, at the end of the model, the live heap must not hold them.
func TestVerifyKeepsNoPendingFrames(t *testing.T) {
	const metas, pad = 64, 512 << 10
	base := firstMeta(t)
	var archive bytes.Buffer
	archive.Write(frameOf(t, &events.HeaderRecord{Version: 2}))
	archive.Write(frameOf(t, &events.ModelStartRecord{ModelName: "issue"}))
	for i := range metas {
		m := *base
		m.ResourceID = fmt.Sprintf("issue:big-%d", i)
		m.CurrentRevisionID = m.ResourceID + ":1"
		m.IndexedData = events.Some[events.Value](events.Map{{Key: "pad", Value: strings.Repeat("x", pad)}})
		data, err := m.Encode(events.Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		archive.Write(frameOf(t, &events.MetaRecord{Data: data}))
	}
	archive.Write(frameOf(t, &events.ModelEndRecord{ModelName: "issue"}))
	archive.Write(frameOf(t, &events.EofRecord{}))
	data := archive.Bytes()

	var live uint64
	missing := 0
	res, err := Verify(context.Background(), bytes.NewReader(data), Options{Size: int64(len(data))}, func(p Problem) {
		if !strings.Contains(p.Msg, "which the archive does not hold") {
			return
		}
		if missing++; missing == 1 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			live = ms.HeapAlloc
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if missing != metas {
		t.Fatalf("Verify reported %d metas without their current revision, want %d (%+v)", missing, metas, res)
	}
	// The archive itself (32 MiB) is live, in data; the pending frames
	// must not add another copy.
	if limit := uint64(len(data)) + 8<<20; live > limit {
		t.Errorf("%d MiB live while reporting missing revisions, want at most %d MiB (the archive plus 8)", live>>20, limit>>20)
	}
	runtime.KeepAlive(data)
}

// TestVerifyRefusesNamesNoEventCanCarry (issue 26, items 3 and 6): a model
// of 1,400 characters passed writer verify and then failed writer replay
// with "maximum control line exceeded", a 200 KiB resource id aborted
// mirror with "header size exceeds 64k", and a model "bad\xff\xfe" or a
// resource "r\xc3", which SpecStar (whose names are Python str) could not
// have written, passed verify too. Verify must refuse each with its reason.
func TestVerifyRefusesNamesNoEventCanCarry(t *testing.T) {
	base := firstMeta(t)
	for _, tc := range []struct {
		name, model, rid, want string
	}{
		{"long model", strings.Repeat("é", 700), "issue:1", "a subject may carry"},
		{"long resource id", "issue", strings.Repeat("r", 200<<10), "an event header may carry"},
		{"model not UTF-8", "bad\xff\xfe", "issue:1", "not valid UTF-8"},
		{"resource id not UTF-8", "issue", "r\xc3", "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var archive bytes.Buffer
			archive.Write(frameOf(t, &events.HeaderRecord{Version: 2}))
			archive.Write(frameOf(t, &events.ModelStartRecord{ModelName: tc.model}))
			m := *base
			m.ResourceID, m.CurrentRevisionID = tc.rid, ""
			data, err := m.Encode(events.Msgpack)
			if err != nil {
				t.Fatal(err)
			}
			archive.Write(frameOf(t, &events.MetaRecord{Data: data}))
			archive.Write(frameOf(t, &events.ModelEndRecord{ModelName: tc.model}))
			archive.Write(frameOf(t, &events.EofRecord{}))
			var found []string
			res, err := Verify(context.Background(), bytes.NewReader(archive.Bytes()), Options{Size: int64(archive.Len())}, func(p Problem) {
				if !p.Warning {
					found = append(found, p.Msg)
				}
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			hit := false
			for _, msg := range found {
				hit = hit || strings.Contains(msg, tc.want)
				if len(msg) > 1024 {
					t.Errorf("a reason of %d bytes: it must quote the name bounded", len(msg))
				}
			}
			if !hit || res.Valid() {
				t.Fatalf("Verify found %q (valid %v), want an error saying %q", found, res.Valid(), tc.want)
			}
		})
	}
}
