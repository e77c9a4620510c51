package main

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testfixtures"
	"github.com/specstar/replicator/stream"
)

// TestReplayKeepsTheStreamsSettings (issue 12, items 1 and 3): `writer
// replay` called create-or-update with its own defaults, so it reset the
// max-age and duplicate window `replicator run` had set, and could not
// publish at all to a stream made with --retention workqueue ("can not
// change retention policy"). Now it publishes to the stream as it is.
func TestReplayKeepsTheStreamsSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	bus, err := stream.Open(ctx, stream.Config{DataDir: dir, Retention: "workqueue", MaxAge: 2 * time.Hour,
		DuplicateWindow: 10 * time.Minute, Given: map[string]bool{"retention": true, "max-age": true, "duplicate-window": true}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()

	code, out, errs := runWriter(t, "replay", testfixtures.Path(t, "small.acbak"), "--nats", bus.URL())
	if code != exitOK {
		t.Fatalf("replay onto a workqueue stream: exit %d\n%s%s", code, out, errs)
	}
	info, err := bus.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.MaxAge != 2*time.Hour || c.Duplicates != 10*time.Minute || c.Retention.String() != "WorkQueue" {
		t.Fatalf("replay changed the stream: max age %v, duplicate window %v, retention %v", c.MaxAge, c.Duplicates, c.Retention)
	}
	if info.State.Msgs != 16 {
		t.Fatalf("the stream holds %d events, want small.acbak's 16", info.State.Msgs)
	}
	// Given explicitly and different: refused, naming the setting.
	code, _, errs = runWriter(t, "replay", testfixtures.Path(t, "small.acbak"), "--nats", bus.URL(), "--duplicate-window", "1h")
	if code == exitOK || !strings.Contains(errs, "duplicate-window") {
		t.Fatalf("replay with a differing --duplicate-window: exit %d, %s", code, errs)
	}
}

// TestReplayPublishesNothingFromABadArchive (issue 12, item 18): `writer
// replay` published records before it knew the archive was valid, so a
// truncated archive left 1,214 events on the stream. It now checks the
// whole archive first and publishes nothing from one `writer verify`
// rejects; --no-check keeps the old streaming behaviour.
func TestReplayPublishesNothingFromABadArchive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := testfixtures.Read(t, "medium.acbak")
	truncated := filepath.Join(t.TempDir(), "truncated.acbak")
	if err := os.WriteFile(truncated, data[:len(data)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	msgs := func(bus *stream.Bus) uint64 {
		t.Helper()
		info, err := bus.Stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	code, _, errs := runWriter(t, "replay", truncated, "--nats", bus.URL())
	if code == exitOK || !strings.Contains(errs, "nothing was published") {
		t.Fatalf("replay of a truncated archive: exit %d, %s", code, errs)
	}
	if n := msgs(bus); n != 0 {
		t.Fatalf("a rejected archive left %d events on the stream", n)
	}
	// Streaming without the check publishes what comes before the fault.
	if code, _, _ := runWriter(t, "replay", truncated, "--nats", bus.URL(), "--no-check"); code == exitOK {
		t.Fatal("replay --no-check of a truncated archive succeeded")
	}
	if n := msgs(bus); n == 0 {
		t.Fatal("replay --no-check published nothing: the test's archive is not truncated where it should be")
	}
}
