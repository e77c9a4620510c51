package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// topLevel lists what a directory holds below each model directory, e.g.
// "ticket/meta", "_blobs".
func topLevel(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".specstar-") {
			continue // the sink's staging directory
		}
		if e.Name() == "_blobs" || !e.IsDir() {
			out = append(out, e.Name())
			continue
		}
		subs, _ := os.ReadDir(filepath.Join(root, e.Name()))
		for _, s := range subs {
			out = append(out, e.Name()+"/"+s.Name())
		}
	}
	slices.Sort(out)
	return out
}

// A deployment whose layers live in three places gets each record in the
// store of its layer, and verifies equal against the archive: described
// by a configuration file and by the --meta/--resources/--blobs flags.
func TestLayeredDeploymentSink(t *testing.T) {
	archive := testfixtures.Path(t, "blobs.acbak")
	for _, how := range []string{"config", "flags"} {
		t.Run(how, func(t *testing.T) {
			bus := testBus(t)
			replay(t, bus, archive)
			dir := t.TempDir()
			metaDir, resDir, blobDir := filepath.Join(dir, "meta"), filepath.Join(dir, "res"), filepath.Join(dir, "blobs")
			cfg := filepath.Join(dir, "specstar.yaml")
			t.Setenv("TEST_MIRROR_ROOT", dir)
			yaml := "nats:\n  url: " + bus.URL() + "\ndeployments:\n  split:\n    meta: disk:${TEST_MIRROR_ROOT}/meta\n    resources: disk:${TEST_MIRROR_ROOT}/res?sync=batch\n    blobs: disk:${TEST_MIRROR_ROOT}/blobs\n"
			if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"run", "--until-drained", "--listen", ""}
			if how == "config" {
				// The bus URL comes from the file, too.
				args = append(args, "--config", cfg, "--sink", "split")
			} else {
				args = append(args, "--nats", bus.URL(), "--meta", "disk:"+metaDir, "--resources", "disk:"+resDir+"?sync=batch", "--blobs", "disk:"+blobDir)
			}
			if code, out, errs := runCmd(t, args...); code != exitOK {
				t.Fatalf("replicator run: exit %d\n%s%s", code, out, errs)
			}
			for _, c := range []struct {
				dir  string
				want func(string) bool
			}{
				{metaDir, func(s string) bool { return strings.HasSuffix(s, "/meta") }},
				{resDir, func(s string) bool { return strings.HasSuffix(s, "/data") }},
				{blobDir, func(s string) bool { return s == "_blobs" }},
			} {
				got := topLevel(t, c.dir)
				if len(got) == 0 {
					t.Fatalf("%s is empty", c.dir)
				}
				for _, g := range got {
					if !c.want(g) {
						t.Errorf("%s holds %s, which belongs to another layer (all: %v)", c.dir, g, got)
					}
				}
			}
			// Both runs wrote the stores the file names.
			code, out, errs := runCmd(t, "verify", "--archive", archive, "--config", cfg, "--sink", "split")
			if code != exitOK || !strings.Contains(out, "equal") {
				t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
			}
			if !strings.Contains(out, " 0 differences") || strings.Contains(out, " 0 blobs compared") {
				t.Fatalf("verify compared no blobs or found differences:\n%s", out)
			}
		})
	}
}

// A layer a store cannot hold is refused before anything runs.
func TestLayeredDeploymentRefusesImpossibleLayers(t *testing.T) {
	code, _, errs := runCmd(t, "run", "--until-drained", "--listen", "", "--meta", "s3://bucket/", "--resources", "disk:/tmp/x")
	if code != exitError || !strings.Contains(errs, "cannot hold meta") {
		t.Fatalf("exit %d, stderr %q: want a usage error naming the meta layer", code, errs)
	}
}
