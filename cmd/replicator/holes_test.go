package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/stream"
)

// TestHolesInTheStreamAreNotIgnored (issue 33, item 1): events deleted
// from the middle of the stream (one `DeleteMsg`, or a purge filtered to
// one model's subjects) were ignored: restore exited 0 without the
// revision, or without the whole model, and only events dropped from the
// stream's start were checked. Now a restore past a hole exits 1 naming
// it unless --accept-gap, and `run` and `status` say the stream lacks
// them, since a sink that consumed past a hole lacks what they held.
func TestHolesInTheStreamAreNotIgnored(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, bus *stream.Bus)
		names  string // what the refusal says of the holes
	}{
		{"one event deleted", func(t *testing.T, bus *stream.Bus) {
			if err := bus.Stream.DeleteMsg(t.Context(), 2); err != nil {
				t.Fatal(err)
			}
		}, "1 events (sequences 2)"},
		{"a purge of one model", func(t *testing.T, bus *stream.Bus) {
			if err := bus.Stream.Purge(t.Context(), jetstream.WithPurgeSubject(bus.Prefix()+".user.>")); err != nil {
				t.Fatal(err)
			}
		}, "deleted from between"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bus := testBus(t)
			nats := []string{"--nats", bus.URL()}
			replay(t, bus, testfixtures.Path(t, "small.acbak"))
			info, err := bus.Stream.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			last := strconv.FormatUint(info.State.LastSeq, 10)
			c.damage(t, bus)

			code, out, errs := runCmd(t, append([]string{"restore", "--to", t.TempDir(), "--at-seq", last}, nats...)...)
			if code != exitDiffer || !strings.Contains(errs, c.names) || !strings.Contains(errs, "--accept-gap") {
				t.Errorf("restore past the hole: exit %d, want 1 naming it (%q) and --accept-gap\n%s%s", code, c.names, out, errs)
			}
			if code, out, errs := runCmd(t, append([]string{"restore", "--to", t.TempDir(), "--at-seq", last, "--accept-gap"}, nats...)...); code != exitOK {
				t.Errorf("restore --accept-gap: exit %d\n%s%s", code, out, errs)
			}
			code, out, errs = runCmd(t, append([]string{"run", "--to", t.TempDir(), "--until-drained", "--listen", ""}, nats...)...)
			if code != exitOK || !strings.Contains(out+errs, "deleted from between its first and last event") {
				t.Errorf("run over the hole: exit %d, want 0 with a warning naming the hole\n%s%s", code, out, errs)
			}
			code, out, errs = runCmd(t, append([]string{"status"}, nats...)...)
			if code != exitOK || !strings.Contains(out, "deleted from between its first and last event") {
				t.Errorf("status: exit %d, want the hole named\n%s%s", code, out, errs)
			}
		})
	}
}
