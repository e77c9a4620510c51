package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/internal/testsupport/waitfor"
	"github.com/specstar/replicator/replicate"
)

// TestServicesLogTheirLifecycle (issue 34, item 4): `replicator run` as a
// service logged nothing at INFO unless given -v, so a pod's `kubectl
// logs` showed nothing of what it did. A service (run without
// --until-drained) now logs its lifecycle at INFO by default, -q quiets
// it, and a one-shot run stays quiet without -v.
func TestServicesLogTheirLifecycle(t *testing.T) {
	bus := testBus(t)
	replay(t, bus, testfixtures.Path(t, "small.acbak"))
	for i, c := range []struct {
		name string
		args []string
		info bool
	}{
		{"service", nil, true},
		{"service -q", []string{"-q"}, false},
		{"service -q=true", []string{"-q=true"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			name := fmt.Sprintf("svc%d", i)
			to := "disk:" + t.TempDir() + "?name=" + name
			var errs lockedBuffer
			done := make(chan int, 1)
			go func() {
				var out lockedBuffer
				done <- run(ctx, append([]string{"run", "--nats", bus.URL(), "--to", to, "--listen", ""}, c.args...), &out, &errs)
			}()
			// Applied: the consumer has nothing pending.
			waitfor.For(t, "the service to apply the stream", func() bool {
				sts, err := replicate.Status(ctx, bus)
				for _, st := range sts {
					if err == nil && st.Name == name {
						return st.Pending == 0 && st.AckPending == 0 && st.AckFloor > 0
					}
				}
				return false
			})
			cancel()
			<-done
			logged := strings.Contains(errs.String(), "level=INFO msg=consuming")
			if logged != c.info {
				t.Errorf("run %v: logged its start at INFO %v, want %v:\n%s", c.args, logged, c.info, errs.String())
			}
			if !c.info && strings.Contains(errs.String(), "level=INFO") {
				t.Errorf("run %v logged INFO lines:\n%s", c.args, errs.String())
			}
		})
	}
	code, out, errs := runCmd(t, "run", "--nats", bus.URL(), "--to", t.TempDir(), "--until-drained", "--listen", "")
	if code != exitOK || strings.Contains(errs, "level=INFO") {
		t.Errorf("run --until-drained: exit %d, want 0 without INFO lines:\n%s%s", code, out, errs)
	}
}
