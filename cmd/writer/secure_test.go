package main

import (
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/natstest"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestReplayToSecuredNATS: writer replay reaches a server of every
// secured kind with the credentials on its command line, is refused with
// exit 2 and a clear error without them, and never prints the secret.
func TestReplayToSecuredNATS(t *testing.T) {
	archive := testfixtures.Path(t, "small.acbak")
	for _, kind := range natstest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := natstest.Start(t, kind)
			code, stdout, stderr := runWriter(t, append([]string{"replay", "-v", "--from", archive, "--nats", srv.URL}, srv.Args()...)...)
			if code != 0 {
				t.Fatalf("replay: exit %d\n%s%s", code, stdout, stderr)
			}
			out := stdout + stderr
			code, stdout, stderr = runWriter(t, "replay", "--from", archive, "--nats", srv.BadURL)
			if code != 2 || !strings.Contains(stderr, "connect to NATS at") {
				t.Fatalf("replay without the right credentials: exit %d, want 2 and a connect error\n%s%s", code, stdout, stderr)
			}
			if out += stdout + stderr; strings.Contains(out, srv.Secret) {
				t.Fatalf("the secret appears in the output:\n%s", out)
			}
		})
	}
}
