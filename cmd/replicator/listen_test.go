package main

import (
	"net"
	"strings"
	"testing"
)

// TestListenBusy: a second service-mode run on a port in use fails at
// once with one error naming --listen; a --until-drained run serves no
// metrics unless asked, so it does not collide.
func TestListenBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	bus := testBus(t)
	code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--to", t.TempDir(), "--listen", addr)
	if code != exitError || !strings.Contains(errs, "--listen "+addr) || !strings.Contains(errs, "in use") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("run on a busy --listen: exit %d\n%s%s", code, out, errs)
	}
	// Hold the default port, as a service would (if nothing else does).
	if def, err := net.Listen("tcp", defaultListen); err == nil {
		defer def.Close()
	}
	if code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--to", t.TempDir(), "--until-drained"); code != exitOK {
		t.Errorf("run --until-drained beside a service: exit %d\n%s%s", code, out, errs)
	}
}
