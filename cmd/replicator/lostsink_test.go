package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestWipedSinkIsRebuilt: a sink drained, then wiped (rm -rf of a mirror,
// a replaced volume, dropped tables, an emptied bucket), then run again
// with the same consumer. Its consumer remembers having acknowledged
// everything; the sink holds no mark of it, so the stream is delivered
// again and the sink verifies equal to the archive, instead of "0 events
// applied" and an empty sink.
func TestWipedSinkIsRebuilt(t *testing.T) {
	archive := testfixtures.Path(t, "small.acbak")
	bus := testBus(t)
	replay(t, bus, archive)
	cases := []struct {
		name string
		// sink opens a fresh sink for the case and returns its URL and
		// the function that wipes it.
		sink func(t *testing.T) (string, func(t *testing.T))
	}{
		{"disk, directory removed", func(t *testing.T) (string, func(t *testing.T)) {
			dir := t.TempDir()
			return "disk:" + dir + "?name=wiped-disk", func(t *testing.T) {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"postgres, every table dropped", func(t *testing.T) (string, func(t *testing.T)) {
			conn, prefix := pgTables(t, "wiped")
			return pgDSN() + pgSep() + "table_prefix=" + prefix + "&revisions=true&name=wiped-pg", func(t *testing.T) {
				dropTables(t, conn, prefix, "")
			}
		}},
		{"postgres, the data tables dropped and the marks kept", func(t *testing.T) (string, func(t *testing.T)) {
			conn, prefix := pgTables(t, "wipedkeep")
			return pgDSN() + pgSep() + "table_prefix=" + prefix + "&revisions=true&name=wiped-pg-keep", func(t *testing.T) {
				dropTables(t, conn, prefix, prefix+"specstar_replicator_marks")
			}
		}},
		{"s3 factory, bucket emptied", func(t *testing.T) (string, func(t *testing.T)) {
			srv := s3test.Start(t)
			srv.CreateBucket(t, "wiped")
			for _, kv := range srv.Env() {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			return benchS3URL(srv, "wiped", "app/") + "&factory=s3&name=wiped-s3", func(t *testing.T) {
				emptyBucket(t, srv.Client(t), "wiped")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sinkURL, wipe := tc.sink(t)
			drain(t, bus, sinkURL)
			if code, out, errs := runCmd(t, "verify", "--from", archive, "--to", sinkURL); code != exitOK {
				t.Fatalf("verify after the first run: %s%s", out, errs)
			}
			wipe(t)
			if code, _, _ := runCmd(t, "verify", "--from", archive, "--to", sinkURL); code == exitOK {
				t.Fatal("the wipe left the sink equal to the archive; it tests nothing")
			}
			out := drain(t, bus, sinkURL)
			if strings.Contains(out, " 0 events applied") {
				t.Errorf("the run after the wipe applied nothing:\n%s", out)
			}
			if code, out, errs := runCmd(t, "verify", "--from", archive, "--to", sinkURL); code != exitOK {
				t.Fatalf("the wiped sink was not rebuilt: %s%s", out, errs)
			}
			// A third run on the intact sink trusts the consumer again.
			if out := drain(t, bus, sinkURL); !strings.Contains(out, " 0 events applied") {
				t.Errorf("a run on the intact, marked sink delivered events again:\n%s", out)
			}
		})
	}
}

// dropTables drops every table whose name starts with prefix, but keep.
func dropTables(t *testing.T, conn *pgx.Conn, prefix, keep string) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, "SELECT tablename::text FROM pg_tables WHERE tablename LIKE $1 AND tablename <> $2", prefix+"%", keep)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("no table of prefix %s to drop", prefix)
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
			t.Fatal(err)
		}
	}
}

// emptyBucket deletes every object of bucket.
func emptyBucket(t *testing.T, c *s3.Client, bucket string) {
	t.Helper()
	ctx := context.Background()
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	n := 0
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: o.Key}); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatalf("bucket %s held nothing to delete", bucket)
	}
}
