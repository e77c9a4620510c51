package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/redistest"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/sink/disk"
	"github.com/specstar/replicator/sink/layered"
	redissink "github.com/specstar/replicator/sink/redis"
	"github.com/specstar/replicator/source"
	"github.com/specstar/replicator/source/redis"
)

var ctx = context.Background()

// redisURL is the Redis meta store URL of a fresh key prefix.
func redisURL(t *testing.T, extra string) string {
	t.Helper()
	u := redistest.SinkURL("prefix=" + url.QueryEscape(redistest.Prefix(t)+"{model}:"))
	if extra != "" {
		u += "&" + extra
	}
	return u
}

// openRedis opens the Redis meta store at u as a sink.
func openRedis(t *testing.T, u string) *redissink.Sink {
	t.Helper()
	spec, err := redissink.ParseSpec(u)
	if err != nil {
		t.Fatal(err)
	}
	st, err := spec.Open(ctx)
	if err != nil {
		t.Fatalf("open the Redis meta store (start redis-server or set REDIS_URL): %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// archiveSet is the set of an archive's Meta, Revision and Blob records,
// each by model and exact bytes.
func archiveSet(t *testing.T, path string) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	for model, fr := range frames(t, path) {
		switch fr.Record.(type) {
		case *events.MetaRecord, *events.RevisionRecord, *events.BlobRecord:
			set[model+"\x00"+string(fr.Payload)] = true
		}
	}
	return set
}

// frames yields an archive's frames with the model of their section.
func frames(t *testing.T, path string) func(func(string, *acbak.Frame) bool) {
	return func(yield func(string, *acbak.Frame) bool) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		model := ""
		for fr, err := range acbak.NewReader(f, acbak.Options{}).All() {
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if ms, ok := fr.Record.(*events.ModelStartRecord); ok {
				model = ms.ModelName
			}
			if !yield(model, fr) {
				return
			}
		}
	}
}

// fill applies an archive to a deployment with its metas in Redis at
// redisU and its revisions and blobs in a disk tree, whose root it
// returns.
func fill(t *testing.T, path, redisU string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	res, err := disk.Open(ctx, root, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := layered.New("fill", openRedis(t, redisU), res, res)
	for model, fr := range frames(t, path) {
		switch r := fr.Record.(type) {
		case *events.MetaRecord:
			m, err := r.Meta()
			if err == nil {
				_, err = l.ApplyMeta(ctx, model, m)
			}
			if err != nil {
				t.Fatal(err)
			}
		case *events.RevisionRecord:
			rr, err := r.Resource()
			if err == nil {
				_, err = l.ApplyRevision(ctx, model, rr)
			}
			if err != nil {
				t.Fatal(err)
			}
		case *events.BlobRecord:
			if _, err := l.ApplyBlob(ctx, r.FileID, r.Size, r.ContentType, strings.NewReader(string(r.BlobData))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return root
}

// sourceSet reads src and returns its records as archiveSet does.
func sourceSet(t *testing.T, src source.Source) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	for r, err := range src.Records(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.Record.Encode(events.Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		set[r.Model+"\x00"+string(b)] = true
	}
	return set
}

// TestSnapshotIsTheArchive: SpecStar's archives stored with their metas
// in Redis and revisions and blobs on disk read back, through source.Open
// of the redis:// URL, as exactly the archive's records.
func TestSnapshotIsTheArchive(t *testing.T) {
	for _, name := range []string{"small.acbak", "blobs.acbak"} {
		t.Run(name, func(t *testing.T) {
			path := testfixtures.Path(t, name)
			u := redisURL(t, "")
			root := fill(t, path, u)
			src, err := source.Open(source.Spec{From: u, Resources: "disk:" + root})
			if err != nil {
				t.Fatal(err)
			}
			want, got := archiveSet(t, path), sourceSet(t, src)
			if len(want) == 0 || len(got) != len(want) {
				t.Errorf("read %d distinct records, the archive holds %d", len(got), len(want))
			}
			for k := range want {
				if !got[k] {
					t.Errorf("a record of the archive was not read (%.80q)", k)
				}
			}
		})
	}
}

// TestOpenErrors: bad URLs and stores are clear errors, not panics.
func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		spec source.Spec
		want string
	}{
		{source.Spec{From: "redis://h/0?encoding=yaml"}, "yaml"},
		{source.Spec{From: "redis://h/0?prefix=x:"}, "models="},
	} {
		if _, err := source.Open(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.spec, err, tc.want)
		}
	}
	for _, tc := range []struct {
		src  redis.Source
		want string
	}{
		{redis.Source{Meta: "redis://127.0.0.1:1/0?dial_timeout=200ms"}, "127.0.0.1:1"},
		{redis.Source{Meta: redistest.URL(), Slow: "s3://b/"}, "slow store"},
		{redis.Source{Meta: redistest.URL(), Resources: "postgres://h/db"}, "resources"},
	} {
		var err error
		for _, e := range tc.src.Records(ctx) {
			err = e
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.src, err, tc.want)
		}
	}
	if _, err := sink.Parse(redistest.SinkURL("slow=postgres://h/db")); err == nil || !strings.Contains(err.Error(), "slow") {
		t.Errorf("a sink with slow=: %v, want it refused", err)
	}
}

func pgDSN() string {
	if dsn := os.Getenv("PG_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// pgURL is a Postgres meta store URL with a fresh table prefix whose
// tables are dropped when the test ends.
func pgURL(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "t_" + hex.EncodeToString(b[:]) + "_"
	conn, err := pgx.Connect(ctx, pgDSN())
	if err != nil {
		t.Fatalf("cannot connect to Postgres at %s (set PG_DSN to a reachable server): %v", pgDSN(), err)
	}
	t.Cleanup(func() {
		rows, _ := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE starts_with(tablename, $1)", prefix)
		names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, n := range names {
			conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE")
		}
		conn.Close(ctx)
	})
	sep := "?"
	if strings.Contains(pgDSN(), "?") {
		sep = "&"
	}
	return fmt.Sprintf("%s%stable_prefix=%s&revisions=false", pgDSN(), sep, prefix)
}
