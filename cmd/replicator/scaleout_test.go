package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/disk"
)

// buildReplicator builds the command into the test's temporary directory
// (benchmarks too: they time `mirror` as a user runs it, in a process of
// its own whose heap and soft memory limit hold nothing of theirs).

// TestScaleOutPostgres: three `replicator run` processes on one Postgres
// sink share its durable consumer; one is killed (SIGKILL) while batches
// are in flight; the two others drain the stream (exit 0, the killed
// one's batch redelivered to them after --ack-wait), and the tables hold
// exactly what one process's run writes, row for row, and verify equal to
// the archive.
func TestScaleOutPostgres(t *testing.T) {
	t.Parallel() // seconds of waiting on processes: overlaps the package's other slow tests
	ctx := context.Background()
	bin := buildReplicator(t)
	archive := testfixtures.Path(t, "medium.acbak")
	bus := testBus(t)
	replay(t, bus, archive)
	conn, prefix := pgTables(t, "scale")
	scaled := pgDSN() + pgSep() + "table_prefix=" + prefix + "n_&revisions=true"
	single := pgDSN() + pgSep() + "table_prefix=" + prefix + "o_&revisions=true"
	drain(t, bus, single)

	spec, err := sink.Parse(scaled)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	done := make([]chan error, 3)
	for i := range done {
		var out strings.Builder
		cmd := exec.Command(bin, "run", "--nats", bus.URL(), "--until-drained", "--listen", "",
			"--batch", "16", "--parallel", "4", "--ack-wait", "3s", "--to", scaled)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done[i] = make(chan error, 1)
		go func() { done[i] <- cmd.Wait() }()
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	})
	// Kill the first once the consumer is under way, with work in flight.
	var cons jetstream.Consumer
	deadline := time.Now().Add(time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the consumer made no progress in a minute")
		}
		if cons == nil {
			cons, _ = bus.Stream.Consumer(ctx, spec.Name)
		}
		if cons != nil {
			if info, err := cons.Info(ctx); err == nil && info.AckFloor.Stream > 0 && info.NumAckPending > 0 {
				if info.NumPending == 0 {
					t.Fatal("the stream was nearly drained before the kill; enlarge the archive or shrink --batch")
				}
				t.Logf("killing process 0 at ack floor %d, %d awaiting an ack, %d pending", info.AckFloor.Stream, info.NumAckPending, info.NumPending)
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmds[0].Process.Signal(syscall.SIGKILL)
	<-done[0]
	for i := 1; i < len(cmds); i++ {
		select {
		case err := <-done[i]:
			if err != nil {
				t.Fatalf("process %d: %v\n%s", i, err, outs[i])
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("process %d did not drain in 2 minutes\n%s", i, outs[i])
		}
	}
	// Each surviving process applied part of the stream.
	for i := 1; i < len(cmds); i++ {
		t.Logf("process %d: %s", i, strings.TrimSpace(outs[i].String()))
		if strings.Contains(outs[i].String(), ": 0 events applied") {
			t.Errorf("process %d applied nothing: the work was not shared\n%s", i, outs[i])
		}
	}

	if code, out, errs := runCmd(t, "verify", "--from", archive, "--to", scaled); code != exitOK {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
	}
	// Row for row what one process wrote.
	tables := func(p string) []string {
		rows, err := conn.Query(ctx, "SELECT substr(tablename, $2) FROM pg_tables WHERE tablename LIKE $1 ORDER BY 1", p+"%", len(p)+1)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		return names
	}
	one, many := tables(prefix+"o_"), tables(prefix+"n_")
	if len(one) == 0 || !slices.Equal(one, many) {
		t.Fatalf("tables differ: one process %v, three %v", one, many)
	}
	digest := func(table string) (n int, sum string) {
		q := `SELECT count(*), coalesce(md5(string_agg(t::text, E'\n' ORDER BY t::text)), '') FROM "` + table + `" t`
		if err := conn.QueryRow(ctx, q).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		return n, sum
	}
	for _, name := range one {
		if name == "specstar_replicator_marks" {
			continue // the replicator's own bookkeeping: when each consumer began
		}
		n1, s1 := digest(prefix + "o_" + name)
		n3, s3 := digest(prefix + "n_" + name)
		if n1 != n3 || s1 != s3 {
			t.Errorf("table %s: one process wrote %d rows, three %d (or other bytes)", name, n1, n3)
		}
	}
}

// TestSecondDiskWriterIsRefused: `replicator run` into a disk root that
// another writer holds exits 2 at once, naming the root and its lock.
func TestSecondDiskWriterIsRefused(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	holder, err := disk.Open(context.Background(), root, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	bus := testBus(t)
	code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--until-drained", "--to", root)
	if code != exitError {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitError, out, errs)
	}
	if !strings.Contains(errs, root) || !strings.Contains(errs, filepath.Join(root, ".specstar-tmp", disk.WriterLockName)) {
		t.Fatalf("the error does not name the root and the lock:\n%s", errs)
	}
}
