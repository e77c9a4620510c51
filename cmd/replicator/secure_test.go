package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/natstest"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/stream"
)

// TestSecuredNATS replays an archive onto a server of every secured kind
// and runs it into a disk sink with `replicator run` given the
// credentials on the command line (or, for TLS and creds, in the --config
// file's nats section); `replicator verify` finds the sink equal to the archive, status
// and stream info work, wrong credentials fail with exit 2 and a clear
// error, and the secret is in no output (-v logs included).
func TestSecuredNATS(t *testing.T) {
	archive := testfixtures.Path(t, "small.acbak")
	for _, kind := range natstest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := natstest.Start(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			bus, err := stream.Open(ctx, stream.Config{URL: srv.URL, Auth: stream.Auth{
				CredsFile: srv.Files["nats-creds"], NkeyFile: srv.Files["nats-nkey"],
				TLSCA: srv.Files["tls-ca"], TLSCert: srv.Files["tls-cert"], TLSKey: srv.Files["tls-key"],
			}}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			replay(t, bus, archive)
			bus.Close()

			conn := append([]string{"--nats", srv.URL}, srv.Args()...)
			if kind == natstest.TLS || kind == natstest.Creds {
				// The same settings from the YAML nats section.
				var y strings.Builder
				y.WriteString("nats:\n  url: " + srv.URL + "\n")
				for k, v := range srv.Files {
					y.WriteString("  " + k + ": " + v + "\n")
				}
				cfg := filepath.Join(t.TempDir(), "specstar.yaml")
				if err := os.WriteFile(cfg, []byte(y.String()), 0o600); err != nil {
					t.Fatal(err)
				}
				conn = []string{"--config", cfg}
			}
			var output strings.Builder
			check := func(code int, stdout, stderr string, wantCode int, what string) {
				t.Helper()
				output.WriteString(stdout + stderr)
				if code != wantCode {
					t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, code, wantCode, stdout, stderr)
				}
			}
			dir := filepath.Join(t.TempDir(), "mirror")
			code, stdout, stderr := runCmd(t, append([]string{"run", "-v", "--to", dir, "--until-drained"}, conn...)...)
			check(code, stdout, stderr, 0, "run")
			if code, stdout, stderr := runCmd(t, "verify", "--from", archive, "--to", dir); code != 0 {
				t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
			}
			code, stdout, stderr = runCmd(t, append([]string{"status", "-v"}, conn...)...)
			check(code, stdout, stderr, 0, "status")
			code, stdout, stderr = runCmd(t, append([]string{"stream", "info", "-v", "--json"}, conn...)...)
			check(code, stdout, stderr, 0, "stream info")

			bad := append([]string{"--nats", srv.BadURL}, argsOf(srv.BadFiles)...)
			if kind == natstest.UserPassword || kind == natstest.Token {
				bad = []string{"--nats", srv.BadURL}
			}
			code, stdout, stderr = runCmd(t, append([]string{"run", "-v", "--to", t.TempDir(), "--until-drained"}, bad...)...)
			check(code, stdout, stderr, 2, "run with wrong credentials")
			if !strings.Contains(stderr, "connect to NATS at") {
				t.Errorf("wrong credentials: stderr does not say what failed: %s", stderr)
			}
			if strings.Contains(output.String(), srv.Secret) {
				t.Fatalf("the secret appears in the commands' output:\n%s", output.String())
			}
		})
	}
}

// argsOf turns files by flag name into flags.
func argsOf(files map[string]string) []string {
	var out []string
	for k, v := range files {
		out = append(out, "--"+k, v)
	}
	return out
}
