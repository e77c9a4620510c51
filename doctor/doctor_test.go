package doctor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/internal/testsupport/freeport"
	"github.com/specstar/replicator/internal/testsupport/pgtest"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/testtmp"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

func TestMain(m *testing.M) { testtmp.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// result is the Result of check in r; the test fails without one.
func result(t *testing.T, r *Report, check string) Result {
	t.Helper()
	for _, res := range r.Results {
		if res.Check == check {
			return res
		}
	}
	t.Fatalf("no %q check in %+v", check, r.Results)
	return Result{}
}

func embeddedBus(t *testing.T) *stream.Bus {
	t.Helper()
	bus, err := stream.Open(context.Background(), stream.Config{DataDir: t.TempDir()}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	return bus
}

func publish(t *testing.T, bus *stream.Bus, n int) {
	t.Helper()
	for i := range n {
		if _, err := bus.JS.Publish(context.Background(), fmt.Sprintf("%s.doctor.m%d", bus.Prefix(), i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
}

// A sink consumer whose next event the stream's limits removed fails,
// naming the events it lacks; the embedded server's fsync policy passes.
func TestCheckConsumerFellOutOfRetention(t *testing.T) {
	ctx := context.Background()
	bus := embeddedBus(t)
	publish(t, bus, 10)
	cons, err := bus.Stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "sink-slow", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(5)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	report := Check(ctx, Options{Bus: bus})
	want{Pass, "ack floor 5 of 10"}.check(t, result(t, report, "consumer sink-slow"))
	want{Pass, "embedded: fsync before every acknowledgement"}.check(t, result(t, report, "fsync"))

	info, err := bus.Stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgs = 8
	if _, err := bus.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	publish(t, bus, 10) // events 11 to 20; the stream keeps 13 to 20
	report = Check(ctx, Options{Bus: bus})
	want{Fail, "events 6 to 12 are gone"}.check(t, result(t, report, "consumer sink-slow"))
	if !report.Failed() {
		t.Error("report with a failed check does not say it failed")
	}
}

// An external server's fsync policy is read from its monitoring
// endpoint: nats-server's default interval fails for a stream of one
// copy, sync_interval: always passes.
func TestCheckFsyncFromMonitor(t *testing.T) {
	for _, c := range []struct {
		name   string
		always bool
		want   want
	}{
		{"default interval", false, want{Fail, "every 2m0s"}},
		{"always", true, want{Pass, "fsync before every acknowledgement"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := &server.Options{
				ServerName: "doctor-" + strings.ReplaceAll(c.name, " ", "-"), Host: "127.0.0.1", Port: freeport.Take(t),
				HTTPHost: "127.0.0.1", HTTPPort: freeport.Take(t), JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
				SyncAlways: c.always,
			}
			srv, err := server.NewServer(opts)
			if err != nil {
				t.Fatal(err)
			}
			srv.Start()
			t.Cleanup(srv.Shutdown)
			if !srv.ReadyForConnections(30 * time.Second) {
				t.Fatal("nats-server did not start")
			}
			bus, err := stream.Open(context.Background(), stream.Config{URL: srv.ClientURL()}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(bus.Close)
			monitor := fmt.Sprintf("http://127.0.0.1:%d", opts.HTTPPort)
			c.want.check(t, result(t, Check(context.Background(), Options{Bus: bus, Monitor: []string{monitor}}), "fsync"))
			// Without the endpoint the policy is unknown: a warning, never a pass.
			want{Warn, "not reported"}.check(t, result(t, Check(context.Background(), Options{Bus: bus}), "fsync"))
		})
	}
}

// The machine's shared server runs wal_level=replica: the check says so.
func TestCheckPostgresWalLevel(t *testing.T) {
	dsn := os.Getenv("PG_DSN")
	if dsn == "" {
		t.Fatal("PG_DSN is not set: the Postgres checks need a server (see README)")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("PG_DSN: %v", err)
	}
	var level string
	if err := conn.QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	r := Check(ctx, Options{Source: dsn, BusErr: fmt.Errorf("not asked")})
	want{Pass, "database"}.check(t, result(t, r, "postgres source"))
	got := result(t, r, "wal_level")
	if level == "logical" {
		want{Pass, "logical"}.check(t, got)
	} else {
		want{Warn, level}.check(t, got)
	}
	want{Pass, "within"}.check(t, result(t, r, "clock postgres"))
}

// In a logical cluster: a slot of the default name that another database
// made fails; the database's own slot with no tail on it warns.
func TestCheckPostgresSlots(t *testing.T) {
	ctx := context.Background()
	admin := pgtest.LogicalCluster(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`CREATE DATABASE prod`, `CREATE DATABASE staging`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	dsnOf := func(db string) string {
		u, err := url.Parse(admin)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + db
		return u.String()
	}
	slotIn := func(db, name string) {
		c, err := pgx.Connect(ctx, dsnOf(db))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
			t.Fatal(err)
		}
	}
	slotIn("staging", "specstar_replicator_prod") // staging's tail took prod's name
	r := Check(ctx, Options{Source: dsnOf("prod"), BusErr: fmt.Errorf("not asked")})
	want{Pass, "logical"}.check(t, result(t, r, "wal_level"))
	want{Fail, `belongs to database "staging"`}.check(t, result(t, r, "slot specstar_replicator_prod"))

	slotIn("prod", "prod_tail")
	r = Check(ctx, Options{Source: dsnOf("prod"), Slot: "prod_tail", BusErr: fmt.Errorf("not asked")})
	want{Warn, "no tail follows it"}.check(t, result(t, r, "slot prod_tail"))
}

// An S3 sink whose credentials may only read fails, naming the refused
// request; with write access it passes and leaves nothing behind; a
// missing bucket fails.
func TestCheckS3Sink(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "doctor")
	proxy := s3test.NewFaultProxy(t, srv.Endpoint)
	sinkAt := func(bucket string) Sink {
		spec, err := sink.Parse("s3://" + bucket + "/app/{model}/?endpoint=" + url.QueryEscape(proxy.URL) + "&region=us-east-1&path_style=true")
		if err != nil {
			t.Fatal(err)
		}
		return Sink{Name: spec.Raw, Consumer: spec.Name, Open: spec.OpenReader}
	}
	bus := embeddedBus(t)
	s := sinkAt("doctor")

	proxy.ReadOnly(true)
	r := Check(ctx, Options{Bus: bus, Sinks: []Sink{s}})
	want{Fail, "AccessDenied"}.check(t, result(t, r, "sink "+s.Name))

	proxy.ReadOnly(false)
	r = Check(ctx, Options{Bus: bus, Sinks: []Sink{s}})
	want{Pass, "list, put and delete allowed"}.check(t, result(t, r, "sink "+s.Name))
	list, err := srv.Client(t).ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String("doctor")})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Contents {
		t.Errorf("the probe left %s behind", aws.ToString(o.Key))
	}

	missing := sinkAt("no-such-bucket")
	want{Fail, "does not exist"}.check(t, result(t, Check(ctx, Options{Bus: bus, Sinks: []Sink{missing}}), "sink "+missing.Name))
}

// A disk sink not created yet warns and is measured on the file system
// that will hold it.
func TestCheckDiskSink(t *testing.T) {
	ctx := context.Background()
	bus := embeddedBus(t)
	publish(t, bus, 3)
	root := filepath.Join(t.TempDir(), "mirror")
	spec, err := sink.Parse(root)
	if err != nil {
		t.Fatal(err)
	}
	s := Sink{Name: spec.Raw, Consumer: spec.Name, DiskRoot: spec.DiskRoot(), Open: spec.OpenReader}
	r := Check(ctx, Options{Bus: bus, Sinks: []Sink{s}})
	want{Warn, "does not exist yet"}.check(t, result(t, r, "sink "+s.Name))
	want{Pass, "in 3 events for it"}.check(t, result(t, r, "disk "+s.Name))
}

// A process that joined the embedded server another process hosts reads
// the host's fsync policy from the data directory: always by default, and
// the host's --sync-interval when it was given one (a failure: one copy).
func TestCheckFsyncOfAJoinedEmbeddedServer(t *testing.T) {
	for _, c := range []struct {
		name     string
		interval time.Duration
		want     want
	}{
		{"default", 0, want{Pass, "embedded: fsync before every acknowledgement"}},
		{"interval", 10 * time.Second, want{Fail, "embedded every 10s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			host, err := stream.Open(context.Background(), stream.Config{DataDir: dir, SyncInterval: c.interval}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(host.Close)
			joined, err := stream.Open(context.Background(), stream.Config{DataDir: dir}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(joined.Close)
			c.want.check(t, result(t, Check(context.Background(), Options{Bus: joined}), "fsync"))
		})
	}
}
