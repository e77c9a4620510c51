package store

import (
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
)

func TestIdentifiers(t *testing.T) {
	for _, c := range []struct {
		kind, id string
		ok       bool
	}{
		{"resource_id", "issue:0d02fdc4-416f-405c-9c6e-e8d0dfb04891", true},
		{"resource_id", "with space and ünïcode", true},
		{"resource_id", ".hidden", true},
		{"resource_id", "...", true},
		{"resource_id", "", false},
		{"resource_id", ".", false},
		{"resource_id", "..", false},
		{"resource_id", "../x", false},
		{"resource_id", "a/b", false},
		{"resource_id", "/abs", false},
		{"resource_id", "x\x00y", false},
		{"resource_id", strings.Repeat("r", 250), true},
		{"resource_id", strings.Repeat("r", 251), false},
		{"revision_id", strings.Repeat("r", 255), true},
		{"revision_id", strings.Repeat("r", 256), false},
		{"revision_id", "issue:1:2", true},
		{"model", "issue", true},
		{"model", "_blobs", false},
		{"model", ".specstar-tmp", false},
		{"model", ".tmp-purge-00", false},
		{"model", ".hidden", true},
		{"model", "..", false},
		{"uid", "0f8fad5b-d9cb-469f-a165-70867728950e", true},
		{"uid", "0F8FAD5B-D9CB-469F-A165-70867728950E", false},
		{"uid", "0f8fad5bd9cb469fa16570867728950e", false},
		{"uid", "0f8fad5b-d9cb-469f-a165-70867728950g", false},
		{"uid", "", false},
		{"file_id", "99aa06d3014798d86001c324468d497f", true},
		{"file_id", "a/b", true},     // a_b
		{"file_id", "..", true},      // _
		{"file_id", "../../x", true}, // ___x
		{"file_id", ".", false},
		{"file_id", "", false},
		{"file_id", "a\x00", false},
	} {
		var err error
		switch c.kind {
		case "resource_id":
			err = CheckResourceID(c.id)
		case "revision_id":
			err = CheckRevisionID(c.id)
		case "model":
			err = CheckModel(c.id)
		case "uid":
			err = CheckUID(c.id)
		case "file_id":
			_, err = CheckFileID(c.id)
		}
		if (err == nil) != c.ok {
			t.Errorf("%s %q: %v, want ok=%v", c.kind, c.id, err, c.ok)
		}
		if err != nil && !IsInvalid(err) {
			t.Errorf("%s %q: %T is not an InvalidError", c.kind, c.id, err)
		}
	}
	for in, want := range map[string]string{"a/b": "a_b", "..": "_", "../x": "__x", "a...b": "a_.b", "./.": "._."} {
		if got := BlobName(in); got != want {
			t.Errorf("BlobName(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range []struct {
		sv   events.Opt[string]
		want string
	}{{events.Opt[string]{}, "no_ver"}, {events.Null[string](), "no_ver"}, {events.Some("v1"), "v_v1"}, {events.Some(""), "v_"}} {
		if got := SchemaDir(c.sv); got != c.want {
			t.Errorf("SchemaDir(%+v) = %q, want %q", c.sv, got, c.want)
		}
	}
}
