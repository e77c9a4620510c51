package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestArchiveS3FactoryRoundTrip: an archive goes onto the stream, the
// replicator materializes it into SpecStar's all-S3 factory (one URL:
// meta.db per model, revisions and blobs in the same bucket) and into a
// disk mirror at once; `writer export` of the factory gives back exactly
// the archive's records, `replicator verify` finds the factory equal to
// the archive (by URL and as a deployment of a configuration file) and
// the disk mirror equal to the factory.
func TestArchiveS3FactoryRoundTrip(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	srv := s3test.Start(t)
	for _, kv := range srv.Env() { // both commands take S3 credentials from the AWS chain
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	for i, name := range []string{"small.acbak", "blobs.acbak"} {
		t.Run(name, func(t *testing.T) {
			archive := testfixtures.Path(t, name)
			bucket := fmt.Sprintf("factory%d", i)
			srv.CreateBucket(t, bucket)
			factory := e2eS3URL(bucket, "app/", srv.Endpoint, srv.Region) + "&factory=s3"
			mirror := filepath.Join(t.TempDir(), "mirror")
			bus := testStream(t)
			if code, out, errs := runWriter(t, "replay", archive, "--nats", bus.URL()); code != exitOK {
				t.Fatalf("replay: %d\n%s%s", code, out, errs)
			}
			if out, err := exec.Command(repl, "run", "--nats", bus.URL(), "--until-drained", "--listen", "",
				"--to", factory, "--to", mirror).CombinedOutput(); err != nil {
				t.Fatalf("replicator run: %v\n%s", err, out)
			}
			exported := filepath.Join(t.TempDir(), "export.acbak")
			if code, out, errs := runWriter(t, "export", "--from", factory, "--to", exported); code != exitOK {
				t.Fatalf("export: %d\n%s%s", code, out, errs)
			}
			if code, out, _ := runWriter(t, "verify", exported); code != exitOK {
				t.Fatalf("the exported archive does not verify:\n%s", out)
			}
			want, got := recordSet(t, archive), recordSet(t, exported)
			if len(want) == 0 || len(got) != len(want) {
				t.Errorf("exported %d distinct records, the archive holds %d", len(got), len(want))
			}
			for k := range want {
				if !got[k] {
					t.Errorf("a record of the archive is missing from the export (%.60q)", k)
				}
			}
			cfg := filepath.Join(t.TempDir(), "specstar.yaml")
			yaml := "deployments:\n  factory:\n    meta: " + factory + "\n    resources: " + factory + "\n    blobs: " + factory + "\n"
			if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"verify", "--from", archive, "--to", factory},
				{"verify", "--from", archive, "--config", cfg, "--to", "factory"},
				{"verify", "--from", factory, "--to", mirror},
			} {
				if out, err := exec.Command(repl, args...).CombinedOutput(); err != nil || !strings.Contains(string(out), "equal") {
					t.Errorf("replicator %s: %v\n%s", strings.Join(args, " "), err, out)
				}
			}
		})
	}
}

// TestTailS3Factory: `writer tail --from s3://...?factory=s3` publishes
// the whole factory, then, when another process writes into it, what
// that added (metas, revisions, blobs), and nothing the factory does not
// hold.
func TestTailS3Factory(t *testing.T) {
	repl := buildBinary(t, "../replicator")
	srv := s3test.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "tailed")
	factory := e2eS3URL("tailed", "app/", srv.Endpoint, srv.Region) + "&factory=s3"
	mirror := func(name string) {
		t.Helper()
		if out, err := exec.Command(repl, "mirror", "--from", testfixtures.Path(t, name), "--to", factory).CombinedOutput(); err != nil {
			t.Fatalf("replicator mirror %s: %v\n%s", name, err, out)
		}
	}
	mirror("small.acbak")
	bus := testStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan string, 1)
	go func() {
		var out, errb bytes.Buffer
		run(ctx, []string{"tail", "--from", factory, "--nats", bus.URL(), "--interval", "100ms", "--listen", ""}, &out, &errb)
		done <- out.String() + errb.String()
	}()
	first := recordSet(t, testfixtures.Path(t, "small.acbak"))
	all := map[string]bool{}
	for k := range first {
		all[k] = true
	}
	for k := range recordSet(t, testfixtures.Path(t, "blobs.acbak")) {
		all[k] = true
	}
	waitStream(t, bus, "the factory", first, all)
	mirror("blobs.acbak")
	waitStream(t, bus, "the writes after it", all, all)
	cancel()
	if out := <-done; !strings.Contains(out, "(poll) stopped") {
		t.Fatalf("tail:\n%s", out)
	}
}
