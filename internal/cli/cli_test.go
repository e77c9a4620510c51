package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestParseOnly: with SPECSTAR_PARSE_ONLY=1 a command line that parses is
// reported as accepted and the command is told to stop (ok false, exit
// 0); one that does not is the usual usage error (exit 2); without the
// variable the command goes on.
func TestParseOnly(t *testing.T) {
	c := &Command{Name: "replicator run", Usage: "replicator run --to URL"}
	for _, tc := range []struct {
		name, env  string
		args       []string
		wantCode   int
		wantOK     bool
		wantStdout string
	}{
		{"accepted", "1", []string{"--to=disk:/data", "-v"}, ExitOK, false, "replicator run: command line accepted\n"},
		{"positional", "1", []string{"extra", "--to=x"}, ExitOK, false, "replicator run: command line accepted, with positional arguments [\"extra\"]\n"},
		{"unknown flag", "1", []string{"--sinks=x"}, ExitError, false, ""},
		{"bad value", "1", []string{"--batch=many"}, ExitError, false, ""},
		{"not set", "", []string{"--to=x"}, ExitOK, true, ""},
		{"set to 0", "0", []string{"--to=x"}, ExitOK, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(ParseOnlyEnv, tc.env)
			var verbose bool
			fs := c.FlagSet(&verbose)
			fs.String("to", "", "what is written")
			fs.Int("batch", 1, "events per batch")
			var stdout, stderr bytes.Buffer
			_, code, ok := c.Parse(fs, tc.args, &stdout, &stderr)
			if code != tc.wantCode || ok != tc.wantOK || stdout.String() != tc.wantStdout {
				t.Fatalf("Parse(%q) = code %d ok %v stdout %q (stderr %q); want code %d ok %v stdout %q",
					tc.args, code, ok, stdout.String(), stderr.String(), tc.wantCode, tc.wantOK, tc.wantStdout)
			}
			if tc.wantCode == ExitError && stderr.Len() == 0 {
				t.Fatalf("Parse(%q): a usage error printed nothing on stderr", tc.args)
			}
		})
	}
}

// TestOneLine (issue 25 item 4): a driver's error listing each address it
// tried (the same dial error twice) is printed once, on one line.
func TestOneLine(t *testing.T) {
	in := "open sink postgres://u@127.0.0.1:1/x: failed to connect to `user=u database=x`:\n" +
		"\t127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused\n" +
		"\t127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"
	want := "open sink postgres://u@127.0.0.1:1/x: failed to connect to `user=u database=x`; 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"
	if got := OneLine(in); got != want {
		t.Errorf("OneLine:\n got %q\nwant %q", got, want)
	}
	var b strings.Builder
	c := &Command{Name: "replicator verify"}
	if code := c.Fail(&b, ExitError, "/a/b.acbak", errors.New("open /a/b.acbak: no such file or directory")); code != ExitError || b.String() != "replicator verify: open /a/b.acbak: no such file or directory\n" {
		t.Errorf("Fail repeated the path or changed the code: %d %q", code, b.String())
	}
}

// TestLogFormat (issue 23, item 3): --log-format json makes every log
// line one JSON object with the fields a text line has; text is the
// default; a bad value is a usage error.
func TestLogFormat(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, LogText},
		{[]string{"--to", "x"}, LogText},
		{[]string{"--log-format", "json"}, LogJSON},
		{[]string{"-log-format=json", "-v"}, LogJSON},
		{[]string{"--log-format=json", "--log-format", "text"}, LogText},
		{[]string{"--log-format=yaml"}, LogText},
		{[]string{"--", "--log-format=json"}, LogText},
	} {
		if got := LogFormat(tc.args); got != tc.want {
			t.Errorf("LogFormat(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
	var buf bytes.Buffer
	log := NewLogger(&buf, true, LogJSON)
	log.Info("connected", "url", "nats://h:4222", "attempt", 2)
	log.Warn("retry", "err", "boom")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", buf.String())
	}
	for _, l := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatalf("line %q is no JSON object: %v", l, err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := obj[k]; !ok {
				t.Errorf("line %q lacks %q", l, k)
			}
		}
	}
	c := &Command{Name: "replicator run", Usage: "replicator run"}
	var verbose bool
	var stdout, stderr bytes.Buffer
	if _, code, _ := c.Parse(c.FlagSet(&verbose), []string{"--log-format", "yaml"}, &stdout, &stderr); code != ExitError || !strings.Contains(stderr.String(), "log format") {
		t.Errorf("--log-format yaml: exit %d, stderr %q; want a usage error", code, stderr.String())
	}
	if _, code, ok := c.Parse(c.FlagSet(&verbose), []string{"--log-format", "json"}, &stdout, &stderr); code != ExitOK || !ok {
		t.Errorf("--log-format json: exit %d ok %v", code, ok)
	}
}

// TestStderrForJSON (issue 23, item 3): with --log-format json the final
// error line (and a usage message) was plain text among JSON log lines.
// Every line is one JSON object now; the logger's lines pass unchanged.
func TestStderrForJSON(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   []string // each line's msg; "" for a line passed unchanged
	}{
		{"final error", []string{"replicator run: sink /x: permission denied\n"}, []string{"replicator run: sink /x: permission denied"}},
		{"logger line passes", []string{`{"time":"t","level":"WARN","msg":"m"}` + "\n"}, []string{""}},
		{"split writes, blank lines", []string{"usage: rep", "licator run\n\n  -x\tflag\n"}, []string{"usage: replicator run", "  -x\tflag"}},
		{"no newline at the end", []string{"last words"}, []string{"last words"}},
		{"a line that only looks like JSON", []string{"{not json\n"}, []string{"{not json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w, done := StderrFor(&out, []string{"run", "--log-format=json"})
			for _, s := range tc.writes {
				if _, err := io.WriteString(w, s); err != nil {
					t.Fatal(err)
				}
			}
			done()
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("%d lines %q, want %d", len(lines), lines, len(tc.want))
			}
			for i, l := range lines {
				var obj map[string]string
				if err := json.Unmarshal([]byte(l), &obj); err != nil {
					t.Fatalf("line %q is no JSON object: %v", l, err)
				}
				if tc.want[i] == "" {
					if l != strings.TrimSuffix(tc.writes[0], "\n") {
						t.Errorf("the logger's line changed: %q", l)
					}
					continue
				}
				if obj["msg"] != tc.want[i] || obj["level"] != "ERROR" || obj["time"] == "" {
					t.Errorf("line %q: want msg %q, level ERROR and a time", l, tc.want[i])
				}
			}
		})
	}
	var out bytes.Buffer
	if w, _ := StderrFor(&out, []string{"run"}); w != io.Writer(&out) {
		t.Error("without --log-format json stderr must be passed as it is")
	}
}
