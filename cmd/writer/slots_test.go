package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/stream"
)

// TestTwoDatabasesTailedAtOnce (issue 34, item 5): the default slot was
// `specstar_replicator` for every database of a cluster, so the tail of a
// second deployment (staging beside prod) retried "replication slot ...
// is active for PID" and gave up. Each database now gets its own slot by
// default, both tails publish their deployment at once, a slot an
// earlier version made in a database is kept there, and naming another
// database's slot is refused at once, saying whose it is.
func TestTwoDatabasesTailedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prod := pgtest.LogicalCluster(t) // the database "postgres"
	conn, err := pgx.Connect(ctx, prod)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE staging"); err != nil {
		t.Fatal(err)
	}
	staging := strings.Replace(prod, "/postgres?", "/staging?", 1)
	const resources = 5
	writers := map[string]*specstarpg.Writer{}
	for _, dsn := range []string{prod, staging} {
		w, err := specstarpg.Open(ctx, dsn, specstarpg.Options{TablePrefix: "slots_"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		writers[dsn] = w
		if err := w.CreateModel(ctx, "issue"); err != nil {
			t.Fatal(err)
		}
		for i := range resources {
			rid := fmt.Sprintf("issue:%d", i)
			if _, err := w.Create(ctx, "issue", rid, payload(rid, i), specstarpg.Write{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	buses := []*stream.Bus{testStream(t), testStream(t)}
	msgs := func(bus *stream.Bus) uint64 {
		info, err := bus.Stream.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	tail := func(tctx context.Context, dsn string, bus *stream.Bus, extra ...string) string {
		var out, errb bytes.Buffer
		args := append([]string{"tail", "--mode", "logical", "--from", dsn + "&table_prefix=slots_", "--nats", bus.URL(), "--listen", ""}, extra...)
		code := run(tctx, args, &out, &errb)
		return fmt.Sprintf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	// An earlier version's tail of prod, whose default slot name was
	// specstar_replicator: its snapshot published, then stopped.
	{
		tctx, cancel := context.WithCancel(ctx)
		done := make(chan string, 1)
		go func() { done <- tail(tctx, prod, buses[0], "--slot", "specstar_replicator") }()
		waitfor.For(t, "the earlier version's snapshot of prod", func() bool { return msgs(buses[0]) >= 2*resources })
		cancel()
		<-done
	}

	// Both tails at once, each onto its own bus, with the default slot.
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i, dsn := range []string{prod, staging} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = tail(tctx, dsn, buses[i])
		}()
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	slots := map[string]string{}
	defer func() {
		stop()
		if t.Failed() {
			t.Logf("active slots %v\nprod's tail: %s\nstaging's tail: %s", slots, outs[0], outs[1])
		}
	}()
	activeSlots := func() int {
		rows, err := conn.Query(ctx, "SELECT slot_name::text, database::text FROM pg_replication_slots WHERE active")
		if err != nil {
			return 0
		}
		defer rows.Close()
		clear(slots)
		for rows.Next() {
			var name, db string
			if rows.Scan(&name, &db) == nil {
				slots[name] = db
			}
		}
		return len(slots)
	}
	waitfor.For(t, "both tails streaming, each on a slot of its own", func() bool {
		return activeSlots() == 2 && msgs(buses[1]) >= 2*resources
	})
	// A change in each database, after the snapshots: it reaches its bus
	// through its own slot.
	for i, dsn := range []string{prod, staging} {
		rid := fmt.Sprintf("issue:%d", resources)
		if _, err := writers[dsn].Create(ctx, "issue", rid, payload(rid, resources), specstarpg.Write{}); err != nil {
			t.Fatal(err)
		}
		waitfor.For(t, fmt.Sprintf("the change of database %d streamed", i), func() bool { return msgs(buses[i]) >= 2*resources+2 })
	}
	activeSlots()
	stop()
	want := map[string]string{"specstar_replicator": "postgres", "specstar_replicator_staging": "staging"}
	for name, db := range want {
		if slots[name] != db {
			t.Errorf("active slots %v, want %v (the earlier version's slot kept for prod, one of its own for staging)", slots, want)
			break
		}
	}

	// A slot of another database, named: refused at once, saying whose.
	code, out, errs := runWriterWithin(t, time.Minute, "tail", "--mode", "logical", "--slot", "specstar_replicator",
		"--from", staging+"&table_prefix=slots_", "--nats", buses[1].URL(), "--listen", "")
	if code != exitInvalid || !strings.Contains(errs, `belongs to database "postgres"`) {
		t.Errorf("tail of staging on prod's slot: exit %d, want %d saying whose slot it is\n%s%s", code, exitInvalid, out, errs)
	}
}
