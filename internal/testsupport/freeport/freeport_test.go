package freeport

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestTakeAvoidsTheEphemeralRange: the ports come from outside the range
// the kernel hands to outgoing connections (the CI failure: a monitor
// port picked with port 0 was taken again before nats-server bound it),
// are distinct, can be bound, and are reserved against other takers.
func TestTakeAvoidsTheEphemeralRange(t *testing.T) {
	t.Setenv(BaseEnv, t.TempDir())
	ephLo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		ephLo, _ = strconv.Atoi(strings.Fields(string(b))[0])
	}
	seen := map[int]bool{}
	for range 50 {
		p := Take(t)
		if p >= ephLo || p < 1024 {
			t.Fatalf("port %d is inside the ephemeral range (from %d) or privileged", p, ephLo)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d cannot be bound: %v", p, err)
		}
		ln.Close()
	}
	for p := range seen {
		if _, ok := lock(os.Getenv(BaseEnv), p); ok {
			t.Fatalf("port %d is handed out but its lock is free", p)
		}
	}
}
