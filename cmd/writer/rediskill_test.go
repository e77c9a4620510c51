package main

import (
	"context"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/redistest"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
)

// TestRedisTailKilledLeavesTheOriginalSetting (issue 34, smaller items):
// `writer tail` of a Redis meta store turns on the keyspace notifications
// it needs and puts the server's notify-keyspace-events back when it
// ends; killed with -9 it could not, and the next tail took the changed
// setting for the original, so the server kept it for good. The next
// tail now finds the original where the killed one kept it and puts that
// back when it ends.
func TestRedisTailKilledLeavesTheOriginalSetting(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	setting := func() string {
		t.Helper()
		v, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v["notify-keyspace-events"]
	}
	orig := setting()
	t.Cleanup(func() { c.ConfigSet(context.Background(), "notify-keyspace-events", orig) })
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "Ez").Err(); err != nil { // someone else's classes
		t.Fatal(err)
	}
	start := setting()

	// A deployment with its metas in Redis.
	repl := buildBinary(t, "../replicator")
	in, out := testStream(t), testStream(t)
	meta := redistest.SinkURL("prefix=" + url.QueryEscape(redistest.Prefix(t)+"{model}:"))
	root := "disk:" + filepath.Join(t.TempDir(), "deployment")
	if code, o, errs := runWriter(t, "replay", testfixtures.Path(t, "small.acbak"), "--nats", in.URL()); code != exitOK {
		t.Fatalf("replay: %d\n%s%s", code, o, errs)
	}
	if o, err := exec.Command(repl, "run", "--nats", in.URL(), "--until-drained", "--listen", "", "--meta", meta, "--resources", root, "--blobs", root).CombinedOutput(); err != nil {
		t.Fatalf("replicator run: %v\n%s", err, o)
	}
	args := []string{"tail", "--from-meta", meta, "--from-resources", root, "--from-blobs", root, "--nats", out.URL(), "--listen", ""}
	following := func() bool {
		list, err := c.ClientList(ctx).Result()
		return err == nil && strings.Contains(list, "name=specstar-replicator-follow")
	}

	// The first tail, killed while it follows.
	cmd := exec.Command(buildBinary(t, "."), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitfor.For(t, "the first tail following", following)
	changed := setting()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitfor.For(t, "the killed tail's connections closed", func() bool { return !following() })
	if got := setting(); got != changed || got == start {
		t.Fatalf("after kill -9: notify-keyspace-events %q, want the tail's %q left (was %q)", got, changed, start)
	}

	// The next tail runs and ends: the original comes back.
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	var o, e syncBuffer
	go func() { done <- run(tctx, args, &o, &e) }()
	waitfor.For(t, "the next tail following", following)
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("writer tail: exit %d\n%s%s", code, o.String(), e.String())
	}
	if got := setting(); got != start {
		t.Errorf("after the next tail ended: notify-keyspace-events %q, want the original %q (the killed tail's %q)", got, start, changed)
	}
}
