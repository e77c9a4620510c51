package main

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestCommandsLeaveStreamSettingsAlone (issue 12, items 1 and 2): `run`
// creates the stream with its flags; `status`, a later `run` without the
// flags and `dlq list` leave them as they are; a `run` whose explicit
// --max-age differs fails naming it; `status --stream TYPO` fails listing
// the streams; `stream apply` is the one way to change a setting.
func TestCommandsLeaveStreamSettingsAlone(t *testing.T) {
	dataDir := t.TempDir()
	sink := filepath.Join(t.TempDir(), "mirror")
	bus := []string{"--data-dir", dataDir, "--listen", ""}
	maxAge := func() time.Duration {
		t.Helper()
		code, out, errs := runCmd(t, "stream", "info", "--data-dir", dataDir, "--json")
		if code != exitOK {
			t.Fatalf("stream info: %d %s", code, errs)
		}
		var info struct {
			Config struct {
				MaxAge     time.Duration `json:"max_age"`
				Duplicates time.Duration `json:"duplicate_window"`
			} `json:"config"`
		}
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("stream info --json: %v\n%s", err, out)
		}
		return info.Config.MaxAge
	}

	// status before anything exists creates nothing.
	if code, _, errs := runCmd(t, "status", "--data-dir", dataDir); code == exitOK || !strings.Contains(errs, "no stream SPECSTAR") {
		t.Fatalf("status on a server without the stream: exit %d, %s", code, errs)
	}
	if code, out, errs := runCmd(t, append([]string{"run", "--until-drained", "--max-age", "2h", "--sink", sink}, bus...)...); code != exitOK {
		t.Fatalf("run --max-age 2h: %d %s %s", code, out, errs)
	}
	if got := maxAge(); got != 2*time.Hour {
		t.Fatalf("after run --max-age 2h the stream keeps %v", got)
	}
	for _, args := range [][]string{
		{"status", "--data-dir", dataDir},
		{"dlq", "list", "--data-dir", dataDir},
		append([]string{"run", "--until-drained", "--sink", sink}, bus...),
	} {
		if code, out, errs := runCmd(t, args...); code != exitOK {
			t.Fatalf("%v: %d %s %s", args, code, out, errs)
		}
		if got := maxAge(); got != 2*time.Hour {
			t.Fatalf("%v reset the stream's max-age to %v", args[:2], got)
		}
	}
	code, _, errs := runCmd(t, append([]string{"run", "--until-drained", "--max-age", "1h", "--sink", sink}, bus...)...)
	if code == exitOK || !strings.Contains(errs, "max-age") || !strings.Contains(errs, "2h0m0s") {
		t.Fatalf("run with a differing --max-age: exit %d, %s", code, errs)
	}
	code, _, errs = runCmd(t, "status", "--data-dir", dataDir, "--stream", "TYPO")
	if code == exitOK || !strings.Contains(errs, "no stream TYPO") || !strings.Contains(errs, "SPECSTAR") {
		t.Fatalf("status --stream TYPO: exit %d, %s", code, errs)
	}
	if code, _, errs := runCmd(t, "stream", "apply", "--data-dir", dataDir, "--max-age", "3h"); code != exitOK {
		t.Fatalf("stream apply: %d %s", code, errs)
	}
	if got := maxAge(); got != 3*time.Hour {
		t.Fatalf("after stream apply --max-age 3h: %v", got)
	}
	// The stream still takes events and the sink applies them.
	b := testBusAt(t, dataDir)
	replay(t, b, testfixtures.Path(t, "small.acbak"))
	if out := drain(t, b, sink); !strings.Contains(out, "16 events applied") {
		t.Fatalf("after the changes: %s", out)
	}
}

// TestSecretsNeverShow (issue 12, item 15): a password= query parameter
// of a sink URL appeared in logs, in `status` (text and JSON) and was
// stored for good in the JetStream consumer's description. The trust-auth
// test server accepts any password, so the sink works with one in its URL.
func TestSecretsNeverShow(t *testing.T) {
	const secret = "Sekr1tPw"
	_, prefix := pgTables(t, "secret")
	pg := pgDSN() + pgSep() + "table_prefix=" + prefix + "&revisions=true&password=" + secret
	if u, err := url.Parse(pg); err == nil && u.User != nil {
		u.User = url.UserPassword(u.User.Username(), secret)
		pg = u.String()
	}
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", pg)
	if code != exitOK {
		t.Fatalf("run: %d %s %s", code, out, errs)
	}
	all := out + errs
	for _, args := range [][]string{
		{"status", "--nats", bus.URL()},
		{"status", "--nats", bus.URL(), "--json"},
		{"verify", "--archive", testfixtures.Path(t, "small.acbak"), "--sink", pg},
		{"verify", "--archive", testfixtures.Path(t, "small.acbak"), "--sink", strings.Replace(pg, "postgres://", "postgres://%zz", 1)},
	} {
		_, out, errs := runCmd(t, args...)
		all += out + errs
	}
	ctx := context.Background()
	for ci := range bus.Stream.ListConsumers(ctx).Info() {
		all += ci.Config.Description + ci.Name
	}
	if strings.Contains(all, secret) {
		t.Fatalf("the password shows:\n%s", all)
	}
}

func runCmdWithin(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	code := run(ctx, args, &out, &errb)
	if ctx.Err() != nil {
		t.Fatalf("%v did not end within %v:\n%s%s", args, d, out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

func TestIncompatibleMetaTableDeadLetters(t *testing.T) {
	ctx := context.Background()
	conn, prefix := pgTables(t, "broken")
	broken := prefix + "issue_meta" // small.acbak's first model
	_, err := conn.Exec(ctx, `CREATE TABLE "`+broken+`" (resource_id TEXT PRIMARY KEY, data TEXT NOT NULL,
		created_time TIMESTAMP NOT NULL, updated_time TIMESTAMP NOT NULL, created_by TEXT NOT NULL,
		updated_by TEXT NOT NULL, is_deleted BOOLEAN NOT NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	pg := pgDSN() + pgSep() + "table_prefix=" + prefix + "&revisions=true&name=pgbroken"
	bus := testBus(t)
	archive := testfixtures.Path(t, "small.acbak")
	replay(t, bus, archive)

	code, out, errs := runCmdWithin(t, time.Minute, "run", "--nats", bus.URL(), "--until-drained", "--listen", "", "--sink", pg)
	if code != exitOK || !strings.Contains(out, "4 dead-lettered") {
		t.Fatalf("run --until-drained: exit %d, want the 4 issue metas dead-lettered\n%s%s", code, out, errs)
	}
	// Everything but the issue metas is in Postgres: the only differences
	// verify finds are those four.
	code, out, _ = runCmd(t, "verify", "--archive", archive, "--sink", pg)
	var diffs []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(line, "model ") {
			diffs = append(diffs, line)
		}
	}
	if code == exitOK || len(diffs) != 4 || !strings.Contains(out, "4 differences") {
		t.Fatalf("verify: exit %d, want exactly the 4 issue metas missing:\n%s", code, out)
	}
	for _, d := range diffs {
		if !strings.Contains(d, `model "issue" meta`) {
			t.Errorf("verify: a difference outside the broken model: %s", d)
		}
	}
	var users int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM "`+prefix+`user_meta"`).Scan(&users); err != nil || users != 2 {
		t.Fatalf("user_meta holds %d rows (%v), want small.acbak's 2", users, err)
	}
	// The dead letters say why, naming table and column.
	code, list, errs := runCmd(t, "dlq", "list", "--nats", bus.URL(), "--sink", "pgbroken")
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if code != exitOK || len(lines) != 5 || lines[4] != "4 dead letters" {
		t.Fatalf("dlq list: exit %d\n%s%s", code, list, errs)
	}
	for _, l := range lines[:4] {
		if !strings.Contains(l, "subject=specstar.issue.meta") || !strings.Contains(l, "reason=") ||
			!strings.Contains(l, `table "`+broken+`"`) || !strings.Contains(l, `column "data"`) {
			t.Errorf("dead letter without the table and column in its reason: %s", l)
		}
	}
}

// TestDLQReplayStaysInTheEventStream is issue 26 item 13: `dlq replay`
// re-published to whatever subject a dead letter's Specstar-Dlq-Subject
// header named, another stream's (here the dead-letter stream itself and
// an unrelated stream) included, and removed the dead letter. Such dead
// letters are refused, left in place and reported; a good one beside
// them is still replayed.
func TestDLQReplayStaysInTheEventStream(t *testing.T) {
	ctx := context.Background()
	bus := testBus(t)
	other, err := bus.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}})
	if err != nil {
		t.Fatal(err)
	}
	deadLetter := func(subject string) {
		t.Helper()
		m := nats.NewMsg(bus.DLQSubject("badsink"))
		m.Header.Set("Specstar-Dlq-Sink", "badsink")
		m.Header.Set("Specstar-Dlq-Subject", subject)
		m.Header.Set("Specstar-Dlq-Reason", "crafted")
		m.Data = []byte("payload")
		if _, err := bus.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	foreign := []string{"other.x", bus.DLQSubject("anothersink"), bus.Prefix() + ".issue", bus.Prefix() + ".issue.meta.extra"}
	for _, s := range foreign {
		deadLetter(s)
	}
	deadLetter(bus.Prefix() + ".issue.meta") // a subject of the event stream
	code, out, errs := runCmd(t, "dlq", "replay", "--nats", bus.URL(), "--sink", "badsink")
	if code == exitOK || !strings.Contains(out, "1 dead letters re-published") {
		t.Fatalf("dlq replay with crafted subjects: exit %d, %s %s; want a failure after re-publishing the good one", code, out, errs)
	}
	for i := range foreign {
		if want := fmt.Sprintf("dead letter %d not re-published", i+1); !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if info, err := other.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("stream OTHER holds %v messages (%v): a dead letter was replayed into it", info.State.Msgs, err)
	}
	dlq, err := bus.JS.Stream(ctx, bus.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(foreign)) {
		t.Fatalf("the dead-letter stream holds %d messages, want the %d refused ones left in place (and none replayed into it)", info.State.Msgs, len(foreign))
	}
}
