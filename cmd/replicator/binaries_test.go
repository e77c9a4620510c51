package main

import (
	"testing"

	"github.com/specstar/replicator/internal/testsupport/gobuild"
)

// binaries holds one build of each command for the whole test binary.
var binaries gobuild.Cache

// buildReplicator is this package's command, built once.
func buildReplicator(tb testing.TB) string { return binaries.Binary(tb, ".", "replicator") }

// buildWriter is the writer command, built once.
func buildWriter(tb testing.TB) string { return binaries.Binary(tb, "../writer", "writer") }
