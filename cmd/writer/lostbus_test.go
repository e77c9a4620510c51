package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/stream"
)

// TestTailRepublishesWhatTheBusLost: the end state of a power cut of a
// bus that does not fsync every acknowledgement (nats-server's default):
// the stream lost its newest events and the positions bucket its newest
// positions, while the Postgres slot kept the LSN the tail had confirmed.
// Resuming from the slot would skip the lost changes for good; the tail
// sees the slot past its stored position and publishes the deployment
// again, so the mirror ends equal to Postgres.
func TestTailRepublishesWhatTheBusLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.LogicalCluster(t)
	prefix := "lost_"
	w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.CreateModel(ctx, "issue"); err != nil {
		t.Fatal(err)
	}
	create := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			rid := fmt.Sprintf("issue:%03d", i)
			if _, err := w.Create(ctx, "issue", rid, payload(rid, i), specstarpg.Write{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	create(0, 5)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	slotLSN := func() pglogrepl.LSN {
		var s *string
		if err := conn.QueryRow(ctx, "SELECT max(confirmed_flush_lsn)::text FROM pg_replication_slots").Scan(&s); err != nil || s == nil {
			return 0
		}
		lsn, _ := pglogrepl.ParseLSN(*s)
		return lsn
	}

	dataDir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	bus, err := stream.Open(ctx, stream.Config{DataDir: dataDir}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { bus.Close() }()
	from := dsn + "&table_prefix=" + prefix
	// tail runs `writer tail` until stop says so (waiting for what), and
	// returns its output.
	tail := func(what string, stop func() bool) string {
		t.Helper()
		tctx, cancel := context.WithCancel(ctx)
		done := make(chan string, 1)
		go func() {
			var out, errb bytes.Buffer
			run(tctx, []string{"tail", "--from", from, "--nats", bus.URL(), "--listen", ""}, &out, &errb)
			done <- out.String() + errb.String()
		}()
		waitfor.For(t, what, stop)
		cancel()
		return <-done
	}
	msgs := func() uint64 {
		info, err := bus.Stream.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	kv, err := bus.Positions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	position := func() jetstream.KeyValueEntry {
		keys, err := kv.Keys(ctx)
		if err != nil || len(keys) != 1 {
			return nil
		}
		e, err := kv.Get(ctx, keys[0])
		if err != nil {
			return nil
		}
		return e
	}

	// The snapshot, then a stored position the slot has confirmed.
	tail("the snapshot, stored and confirmed", func() bool { return msgs() >= 10 && slotLSN() > 0 && position() != nil })
	before := position()
	seqBefore := func() uint64 { info, _ := bus.Stream.Info(ctx); return info.State.LastSeq }()

	// Changes after it, published and confirmed to Postgres.
	create(5, 15)
	confirmedBefore := slotLSN()
	tail("the changes, published and confirmed", func() bool { return msgs() >= 30 && slotLSN() > confirmedBefore })

	// The power cut's end state: what came after seqBefore is gone from
	// the stream, the bucket holds the older position, and the server
	// restarts (which also forgets the lost events' de-duplication ids).
	last := func() uint64 { info, _ := bus.Stream.Info(ctx); return info.State.LastSeq }()
	for seq := seqBefore + 1; seq <= last; seq++ {
		if err := bus.Stream.DeleteMsg(ctx, seq); err != nil {
			t.Fatalf("delete event %d: %v", seq, err)
		}
	}
	if _, err := kv.Put(ctx, before.Key(), before.Value()); err != nil {
		t.Fatal(err)
	}
	bus.Close()
	if bus, err = stream.Open(ctx, stream.Config{DataDir: dataDir}, quiet); err != nil {
		t.Fatal(err)
	}

	repl := buildBinary(t, "../replicator")
	mirror := t.TempDir()
	equal := func() bool {
		if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--to", mirror).CombinedOutput(); err != nil {
			t.Fatalf("replicator run: %v\n%s", err, out)
		}
		out, err := exec.Command(repl, "verify", "--from", from, "--to", mirror).CombinedOutput()
		return err == nil && bytes.Contains(out, []byte(": equal:"))
	}
	out := tail("a mirror equal to Postgres after the loss", equal)
	if !strings.Contains(out, "publishing the whole deployment again") {
		t.Errorf("the tail did not say it republished:\n%s", out)
	}
}
