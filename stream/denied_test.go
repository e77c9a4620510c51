package stream_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/specstar/replicator/stream"
)

// TestRefusedIsNotUnavailable: a user that may read streams but not
// create them opens a server without the stream. The server refuses the
// create with an asynchronous permissions error and never answers; the
// open fails at once with that refusal, naming the subject, instead of
// waiting minutes for a cluster it takes to be unavailable.
func TestRefusedIsNotUnavailable(t *testing.T) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"),
		Users: []*server.User{{Username: "reader", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("server did not start")
	}
	url := strings.Replace(srv.ClientURL(), "nats://", "nats://reader:pw@", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	_, err = stream.Open(ctx, stream.Config{URL: url}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var denied *stream.DeniedError
	if !errors.As(err, &denied) || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("open as a user that may not create streams: %v (after %s), want a refusal", err, time.Since(start).Round(time.Millisecond))
	}
	if !strings.Contains(err.Error(), "$JS.API.STREAM.CREATE.SPECSTAR") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("the refusal does not name what was refused: %v", err)
	}
}
