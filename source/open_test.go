package source_test

import (
	"context"
	"strings"
	"testing"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/source/disk"
	"github.com/specstar/replicator/source/postgres"
	"github.com/specstar/replicator/source/redis"
	"github.com/specstar/replicator/source/s3"
)

// TestOpenDispatch: Open picks the backend by the URL's scheme and
// refuses what no backend reads, without opening anything.
func TestOpenDispatch(t *testing.T) {
	for _, c := range []struct {
		from    string
		want    any
		wantErr string
	}{
		{from: "some/archive.acbak", want: &archive.Source{}},
		{from: "file:///tmp/a.acbak", want: &archive.Source{}},
		{from: "postgres://u:secret@h/db?table_prefix=p_", want: &postgres.DeploymentSource{}},
		{from: "postgresql://h/db", want: &postgres.DeploymentSource{}},
		{from: "s3://bucket/{model}/data/", want: &s3.Source{}},
		{from: "redis://:secret@h:6379/0?prefix={model}:", want: &redis.Source{}},
		{from: "redis://:secret@h:6379/0?encoding=yaml", wantErr: "yaml"},
		{from: "disk:/var/lib/specstar", want: &disk.Source{}},
		{from: t.TempDir(), want: &disk.Source{}}, // a directory is a disk tree
		{from: "ftp://h/x", wantErr: `unknown scheme "ftp:"`},
		{from: "dsk:/tmp/a.acbak", wantErr: `unknown scheme "dsk:" (known: file, disk, postgres`}, // not a relative path
		{from: "./dsk:/tmp/a.acbak", want: &archive.Source{}},
		{from: "postgres://u:secret@h/db?encoding=yaml", wantErr: "xxxxx"},
		{from: "", wantErr: "no source given"},
	} {
		src, err := source.Open(source.Spec{From: c.from})
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || strings.Contains(err.Error(), "secret") {
				t.Errorf("Open(%q): error %v, want one containing %q (and no password)", c.from, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", c.from, err)
			continue
		}
		if got, want := typeName(src), typeName(c.want); got != want {
			t.Errorf("Open(%q) = %s, want %s", c.from, got, want)
		}
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *archive.Source:
		return "archive"
	case *postgres.DeploymentSource:
		return "postgres"
	case *s3.Source:
		return "s3"
	case *disk.Source:
		return "disk"
	case *redis.Source:
		return "redis"
	}
	return "other"
}

// TestOpenArchiveRecords: an archive opened by path yields its metas,
// revisions and blobs, each with its model, frame position and exact bytes.
func TestOpenArchiveRecords(t *testing.T) {
	frames := 0
	src, err := source.Open(source.Spec{From: testfixtures.Path(t, "blobs.acbak"), Progress: func(n int, _ int64) { frames = n }})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for rec, err := range src.Records(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Model == "" || !strings.HasPrefix(rec.Where, "frame ") || len(rec.Payload) == 0 {
			t.Errorf("record %T: model %q, where %q, %d payload bytes", rec.Record, rec.Model, rec.Where, len(rec.Payload))
		}
		switch rec.Record.(type) {
		case *events.MetaRecord:
			counts["meta"]++
		case *events.RevisionRecord:
			counts["revision"]++
		case *events.BlobRecord:
			counts["blob"]++
		}
	}
	if counts["meta"] != 5 || counts["revision"] == 0 || counts["blob"] != 5 || frames == 0 {
		t.Errorf("counts %v, %d frames reported", counts, frames)
	}
}
