package main

// Tests of what the command line promises (issue 13) that the vocabulary
// and exit-code tests do not cover.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestJSONIsOneObject (issue 13, item 5): with --json a command prints
// exactly one JSON object on stdout, whose counts are the command's, and
// its logs go to stderr.
func TestJSONIsOneObject(t *testing.T) {
	archive := testfixtures.Path(t, "small.acbak")
	dir := filepath.Join(t.TempDir(), "mirror")
	for _, tc := range []struct {
		args []string
		want map[string]any
	}{
		{[]string{"mirror", "--from", archive, "--to", dir, "--json"}, map[string]any{"metas": 6.0, "revisions": 10.0, "applied": 16.0, "dead_lettered": 0.0}},
		{[]string{"verify", "--from", archive, "--to", dir, "--json"}, map[string]any{"equal": true, "metas": 6.0, "revisions": 10.0, "differences": 0.0}},
	} {
		code, out, errs := runCmd(t, tc.args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\n%s%s", tc.args, code, out, errs)
		}
		dec := json.NewDecoder(strings.NewReader(out))
		var got map[string]any
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("%v: stdout is not a JSON object: %v\n%s", tc.args, err, out)
		}
		if dec.More() {
			t.Fatalf("%v: more than one value on stdout:\n%s", tc.args, out)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v: %s = %v, want %v (%s)", tc.args, k, got[k], v, out)
			}
		}
	}
}

// TestQuietUnlessVerboseAndNoDoneOnFailure (issue 13, item 7): a batch
// command prints its summary and no INFO log lines unless -v, and a
// command that fails never logs "done".
func TestQuietUnlessVerboseAndNoDoneOnFailure(t *testing.T) {
	archive := testfixtures.Path(t, "small.acbak")
	dir := filepath.Join(t.TempDir(), "mirror")
	_, _, errs := runCmd(t, "mirror", "--from", archive, "--to", dir)
	if strings.Contains(errs, "level=INFO") {
		t.Errorf("mirror without -v logged INFO lines:\n%s", errs)
	}
	_, _, errs = runCmd(t, "mirror", "--from", archive, "--to", filepath.Join(t.TempDir(), "again"), "-v")
	if !strings.Contains(errs, "level=INFO") {
		t.Errorf("mirror -v logged no INFO line:\n%s", errs)
	}
	// A truncated archive: verify fails, and says so rather than "done".
	data := testfixtures.Read(t, "medium.acbak")
	bad := filepath.Join(t.TempDir(), "cut.acbak")
	if err := writeFile(bad, data[:len(data)/2]); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCmd(t, "verify", "--from", bad, "--to", dir, "-v")
	if code == exitOK {
		t.Fatal("verify of a truncated archive succeeded")
	}
	if strings.Contains(errs, " done\"") || strings.Contains(errs, " done ") {
		t.Errorf("a failed verify logged done:\n%s", errs)
	}
}

// TestPostgresSinkKeepsRevisionsByDefault (issue 13, item 9): a
// postgres:// sink given alone stored metas only unless revisions=true,
// reported every event applied, and the Postgres source (revisions on by
// default) then failed on tables the sink never made. Sink and source now
// agree: the sink keeps revisions too, and the round trip verifies.
func TestPostgresSinkKeepsRevisionsByDefault(t *testing.T) {
	conn, prefix := pgTables(t, "defrev")
	pg := pgDSN() + pgSep() + "table_prefix=" + prefix
	archive := testfixtures.Path(t, "small.acbak")
	if code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", pg); code != exitOK {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM "`+prefix+`resource_data"`).Scan(&n); err != nil {
		t.Fatalf("no revisions table: %v", err)
	}
	if n != 10 {
		t.Fatalf("%d revisions stored, want small.acbak's 10", n)
	}
	if code, out, errs := runCmd(t, "verify", "--from", pg, "--to", filepath.Join(t.TempDir(), "none")); code == exitOK {
		t.Fatalf("verify against a missing sink succeeded:\n%s%s", out, errs)
	}
	dir := filepath.Join(t.TempDir(), "mirror")
	if code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", dir); code != exitOK {
		t.Fatalf("mirror to disk: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runCmd(t, "verify", "--from", pg, "--to", dir); code != exitOK {
		t.Fatalf("verify --from %s (the source reads revisions by default): exit %d\n%s%s", pg, code, out, errs)
	}
}

// TestDiskMetaFormDetected (issue 13, item 3): a reader of a disk tree
// whose metas are in meta.db reported every meta missing unless told
// meta=sqlite; it now finds them either way.
func TestDiskMetaFormDetected(t *testing.T) {
	archive := testfixtures.Path(t, "small.acbak")
	dir := filepath.Join(t.TempDir(), "mirror")
	if code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", "disk:"+dir+"?meta=sqlite"); code != exitOK {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runCmd(t, "verify", "--from", archive, "--to", dir); code != exitOK || !strings.Contains(out, "equal") {
		t.Fatalf("verify of a meta.db tree without meta=sqlite: exit %d\n%s%s", code, out, errs)
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }

// TestMirrorDiskSyncDefault: a mirror into a disk sink makes each batch
// durable with one syncfs unless the URL says sync=file, says which in its
// summary, and the tree verifies equal either way.
func TestMirrorDiskSyncDefault(t *testing.T) {
	archive := testfixtures.Path(t, "small.acbak")
	for _, tc := range []struct{ query, want string }{
		{"", "batch"},
		{"?sync=file", "file"},
		{"?sync=batch", "batch"},
	} {
		dir := filepath.Join(t.TempDir(), "mirror")
		code, out, errs := runCmd(t, "mirror", "--from", archive, "--to", "disk:"+dir+tc.query, "--json")
		if code != exitOK {
			t.Fatalf("mirror %q: exit %d\n%s%s", tc.query, code, out, errs)
		}
		var got struct{ Sync string }
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Sync != tc.want {
			t.Errorf("mirror %q: sync %q (%v), want %q: %s", tc.query, got.Sync, err, tc.want, out)
		}
		code, out, _ = runCmd(t, "verify", "--from", archive, "--to", "disk:"+dir+tc.query)
		if code != exitOK || !strings.Contains(out, ": equal:") {
			t.Errorf("verify %q: exit %d\n%s", tc.query, code, out)
		}
	}
}

// TestStreamApplySaysWhatToChange (issue 25 item 5): a max-age shorter
// than the duplicate window is refused with what to change, not only
// NATS' err_code=10052.
func TestStreamApplySaysWhatToChange(t *testing.T) {
	dataDir := t.TempDir()
	if code, out, errs := runCmd(t, "stream", "apply", "--data-dir", dataDir, "--duplicate-window", "2h", "--max-age", "24h"); code != exitOK {
		t.Fatalf("stream apply --duplicate-window 2h: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs := runCmd(t, "stream", "apply", "--data-dir", dataDir, "--max-age", "1h")
	if code != exitError || !strings.Contains(errs, "give --duplicate-window 1h0m0s or less") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("stream apply --max-age 1h under a 2 h duplicate window: exit %d, want 2 with one line saying what to change\n%s%s", code, out, errs)
	}
}

// TestHelpOfGroupsAndUnknownCommands (issue 25 item 5): `help bogus`
// names bogus alone, and the groups' help shows examples.
func TestHelpOfGroupsAndUnknownCommands(t *testing.T) {
	code, _, errs := runCmd(t, "help", "bogus")
	if code != exitError || !strings.HasPrefix(errs, `replicator: unknown command "bogus"`+"\n") {
		t.Errorf("help bogus: exit %d\n%s", code, errs)
	}
	for _, args := range [][]string{{"dlq", "--help"}, {"stream", "--help"}, {"help", "dlq"}, {"help", "stream"}} {
		group := args[0]
		if group == "help" {
			group = args[1]
		}
		code, out, errs := runCmd(t, args...)
		if code != exitOK || !strings.Contains(out, "\nexamples:\n  replicator "+group+" ") {
			t.Errorf("%v: exit %d, want 0 with examples\n%s%s", args, code, out, errs)
		}
	}
}

// TestReadOnlyCommandsListNoStreamSettings (issue 25 item 6): status,
// dlq list and stream info create no stream, so their help lists no
// stream-creation defaults (the mirror flags say where the stream is, so
// they take them: issue 34, item 2); mirror lists none of run's
// stream-only consumer flags.
func TestReadOnlyCommandsListNoStreamSettings(t *testing.T) {
	for _, args := range [][]string{{"status"}, {"dlq", "list"}, {"stream", "info"}, {"mirror"}} {
		_, out, _ := runCmd(t, append(args, "--help")...)
		flags := []string{"--max-age", "--max-bytes", "--retention", "--replicas", "--accept-gap", "--mirror-wait"}
		if args[0] != "mirror" { // mirror's own embedded stream has its window
			flags = append(flags, "--duplicate-window")
		} else { // and is no mirror of anything; the others connect to one that may be (issue 34, item 2)
			flags = append(flags, "--mirror-of")
		}
		for _, f := range flags {
			if strings.Contains(out, "\n  "+f+" ") || strings.Contains(out, "\n  "+f+"\n") {
				t.Errorf("%v --help lists %s:\n%s", args, f, out)
			}
		}
		if !strings.Contains(out, "--nats") && args[0] != "mirror" {
			t.Errorf("%v --help lists no --nats:\n%s", args, out)
		}
	}
}
