package stream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/internal/testsupport/natstest"
	"github.com/specstar/replicator/stream"
)

// authOf is the Auth a client of srv gives, from files by flag name.
func authOf(files map[string]string) stream.Auth {
	return stream.Auth{
		CredsFile: files["nats-creds"], NkeyFile: files["nats-nkey"],
		TLSCA: files["tls-ca"], TLSCert: files["tls-cert"], TLSKey: files["tls-key"],
	}
}

// TestSecuredServers connects to a server of every secured kind with the
// right credentials (the stream is created and takes a publish), and is
// refused with the wrong or missing ones, with a message that names the
// server but never its secret; the log never holds the secret either.
func TestSecuredServers(t *testing.T) {
	for _, kind := range natstest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := natstest.Start(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

			bus, err := stream.Open(ctx, stream.Config{URL: srv.URL, Auth: authOf(srv.Files)}, log)
			if err != nil {
				t.Fatalf("right credentials refused: %v", err)
			}
			if _, err := bus.JS.Publish(ctx, "specstar.m.meta", []byte("x")); err != nil {
				t.Fatalf("publish: %v", err)
			}
			if info, err := bus.Stream.Info(ctx); err != nil || info.State.Msgs != 1 {
				t.Fatalf("stream holds %v messages (err %v), want 1", info, err)
			}
			bus.Close()

			wrong := map[string]stream.Config{
				"wrong": {URL: srv.BadURL, Auth: authOf(srv.BadFiles)},
				"none":  {URL: strings.Replace(srv.URL, srv.Secret+"@", "", 1)},
			}
			if kind == natstest.UserPassword {
				wrong["none"] = stream.Config{URL: "nats://" + srv.URL[strings.LastIndex(srv.URL, "@")+1:]}
			}
			for name, cfg := range wrong {
				short, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := stream.Open(short, cfg, log)
				cancel()
				if err == nil {
					t.Fatalf("%s credentials accepted", name)
				}
				msg := err.Error()
				t.Logf("%s credentials: %s", name, msg)
				if !strings.Contains(msg, "connect to NATS at") {
					t.Errorf("%s credentials: error %q does not say what failed", name, msg)
				}
				if strings.Contains(msg, srv.Secret) {
					t.Errorf("%s credentials: error %q shows the secret", name, msg)
				}
			}
			if strings.Contains(logs.String(), srv.Secret) {
				t.Errorf("the log shows the secret:\n%s", logs.String())
			}
		})
	}
}

// TestAuthFileErrors: a file that cannot be read, half a client
// certificate, or settings for the embedded server are refused before
// connecting, naming the flag.
func TestAuthFileErrors(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		cfg  stream.Config
		want string
	}{
		{"missing creds", stream.Config{URL: "nats://127.0.0.1:1", Auth: stream.Auth{CredsFile: "/nonexistent/x.creds"}}, "--nats-creds"},
		{"missing nkey", stream.Config{URL: "nats://127.0.0.1:1", Auth: stream.Auth{NkeyFile: "/nonexistent/x.nk"}}, "--nats-nkey"},
		{"both", stream.Config{URL: "nats://127.0.0.1:1", Auth: stream.Auth{CredsFile: "a", NkeyFile: "b"}}, "exclusive"},
		{"cert without key", stream.Config{URL: "nats://127.0.0.1:1", Auth: stream.Auth{TLSCert: "a"}}, "--tls-key"},
		{"embedded", stream.Config{DataDir: t.TempDir(), Auth: stream.Auth{TLSCA: "ca.pem"}}, "external NATS server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stream.Open(ctx, tc.cfg, log)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestRedactURL: user:password@ and token@ never survive redaction.
func TestRedactURL(t *testing.T) {
	for _, raw := range []string{
		"nats://user:s3cret@host:4222",
		"nats://s3cret@host:4222",
		"tls://user:s3cret@a:4222,nats://s3cret@b:4222",
	} {
		if got := stream.RedactURL(raw); strings.Contains(got, "s3cret") {
			t.Errorf("RedactURL(%q) = %q", raw, got)
		}
	}
}

// TestMalformedURLHidesThePassword (issue 23, item 6): a malformed --nats
// URL or NATS_URL printed its password in the parse error.
func TestMalformedURLHidesThePassword(t *testing.T) {
	for _, raw := range []string{
		"nats://bob:p@ss/w#rd?x%@127.0.0.1:14227", // the issue's own
		"nats://bob:S3cretPw%zz@127.0.0.1:14227",
		"nats://bob:S3cretPw@127.0.0.1:notaport",
		"nats://bob:S3cretPw@[::1",
		"bob:S3cretPw%@127.0.0.1:14227", // no scheme
		"nats://S3cretPw%zz@127.0.0.1:14227",
		"nats://a:b@127.0.0.1:1, tls://bob:S3cretPw\x7f@127.0.0.1:2",
	} {
		secret := "S3cretPw"
		if strings.Contains(raw, "p@ss") {
			secret = "p@ss/w#rd"
		}
		err := stream.CheckURL(raw)
		if err == nil {
			t.Errorf("CheckURL(%q) accepted it", raw)
			err = errors.New("")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, oerr := stream.Open(ctx, stream.Config{URL: raw}, slog.New(slog.DiscardHandler))
		cancel()
		if oerr == nil {
			t.Fatalf("Open(%q) connected", raw)
		}
		for _, e := range []error{err, oerr} {
			if msg := e.Error(); strings.Contains(msg, secret) || strings.Contains(msg, secret[:4]) {
				t.Errorf("error for %q shows the password: %s", raw, msg)
			}
		}
	}
}

// TestLooseSecretFilesAreWarned (issue 34, smaller items): an nkey seed,
// a credentials file or a TLS key that group or others can read was used
// without a word. It is still used (the connection succeeds), with a
// warning naming the flag, the file and chmod 600, as ssh warns of a
// private key; at 0600 nothing is said.
func TestLooseSecretFilesAreWarned(t *testing.T) {
	tried := 0
	for _, kind := range natstest.Kinds {
		srv := natstest.Start(t, kind)
		for _, flag := range []string{"nats-creds", "nats-nkey", "tls-key"} {
			path := srv.Files[flag]
			if path == "" {
				continue
			}
			tried++
			for _, c := range []struct {
				mode os.FileMode
				warn bool
			}{{0o644, true}, {0o640, true}, {0o600, false}} {
				if err := os.Chmod(path, c.mode); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var logs bytes.Buffer
				bus, err := stream.Open(ctx, stream.Config{URL: srv.URL, Auth: authOf(srv.Files)}, slog.New(slog.NewTextHandler(&logs, nil)))
				cancel()
				if err != nil {
					t.Fatalf("%s: --%s at %04o: %v", kind, flag, c.mode, err)
				}
				bus.Close()
				warned := strings.Contains(logs.String(), "--"+flag+" "+path) && strings.Contains(logs.String(), "chmod 600")
				if warned != c.warn {
					t.Errorf("%s: --%s at %04o: warned %v, want %v\n%s", kind, flag, c.mode, warned, c.warn, logs.String())
				}
			}
		}
	}
	if tried == 0 {
		t.Fatal("no server kind takes a secret file")
	}
}
