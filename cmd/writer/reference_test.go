package main

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/cli"
)

var updateReference = flag.Bool("update-reference", false, "rewrite docs/cli's writer pages from the commands' --help (go generate)")

// TestCLIReference: docs/cli has one page per command, made from its
// --help, and none is stale; `go generate ./cmd/...` remakes them.
func TestCLIReference(t *testing.T) {
	// Defaults that come from the environment read the same anywhere.
	t.Setenv("XDG_STATE_HOME", "~/.local/state")
	t.Setenv("NATS_URL", "")
	t.Setenv("SPECSTAR_CONFIG", "")
	pages := map[string][]byte{}
	var names []string
	for name := range commands {
		var out, errs bytes.Buffer
		if code := run(context.Background(), append(strings.Fields(name), "--help"), &out, &errs); code != exitOK {
			t.Fatalf("writer %s --help: exit %d\n%s", name, code, errs.String())
		}
		names = append(names, "writer "+name)
		pages[cli.PageFile("writer "+name)] = cli.ReferencePage("writer "+name, out.String())
	}
	pages["writer.md"] = cli.ReferenceIndex("writer", usage, names)
	stale, err := cli.SyncReference(filepath.Join("..", "..", cli.ReferenceDir), "writer", pages, *updateReference)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 && !*updateReference {
		t.Errorf("docs/cli is not what the commands print; run go generate ./cmd/... and commit it:\n%s", strings.Join(stale, "\n"))
	}
}
