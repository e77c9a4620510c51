package stream

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestStartServerOnASquattedPort: a port taken between canBind and the
// server's own bind (the race a takeover runs when a squatter or a second
// process grabs the old port) starts the server on another port at once,
// where it used to wait 30 s for a listener that never came and fail.
func TestStartServerOnASquattedPort(t *testing.T) {
	squat, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squat.Close()
	port := squat.Addr().(*net.TCPAddr).Port
	srv, err := startServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"), NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatalf("start on squatted port %d: %v", port, err)
	}
	defer srv.Shutdown()
	if got := srv.Addr().(*net.TCPAddr).Port; got == port {
		t.Fatalf("the server says it listens on the squatted port %d", port)
	}
}
