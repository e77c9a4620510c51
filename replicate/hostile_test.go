package replicate_test

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// TestModelComesFromTheSubject (issue 12, item 5): the worker took the
// model from the Specstar-Model header, which the NATS client trims and
// rewrites, so metas of models "issue ", " issue", "issue\t" landed in
// model "issue" (and "iss\nue" in "iss ue"), overwriting another model's
// resources. Each must land in its own model.
func TestModelComesFromTheSubject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()

	base, _ := firstMetaAndRevision(t)
	models := []string{"issue", "issue ", " issue", "issue\t", "iss\nue", "iss ue"}
	pub := bus.NewPublisher(16)
	for _, model := range models {
		m := *base
		m.CreatedBy = "owner of " + model // tells the models' metas apart
		data, err := m.Encode(events.Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		env, err := events.EnvelopeFor(bus.Prefix(), model, &events.MetaRecord{Data: data}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	snk, err := sink.Open(ctx, "disk:"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	w, err := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: "models"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for _, model := range models {
		if _, err := os.Stat(filepath.Join(dir, model)); err != nil {
			t.Errorf("model %q has no directory of its own: %v", model, err)
			continue
		}
		got, err := snk.(sink.Reader).Meta(ctx, model, base.ResourceID)
		if err != nil {
			t.Errorf("model %q: %v", model, err)
			continue
		}
		if got.CreatedBy != "owner of "+model {
			t.Errorf("model %q holds the meta of %q", model, got.CreatedBy)
		}
	}
}

// TestHashMismatchIsCountedAndLogged (issue 12, item 19): a revision
// whose data_hash does not match its payload, and that is no migration,
// was written without a word. It is still written (SpecStar would read
// it), but counted in specstar_sink_data_hash_mismatches_total and
// logged with the revision named, as writer verify reports it.
func TestHashMismatchIsCountedAndLogged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()

	_, res := firstMetaAndRevision(t)
	if res.Info.Migrated() || !res.Info.DataHash.IsSet() {
		t.Fatal("the fixture's first revision should be a plain one with a data_hash")
	}
	good := *res
	bad := *res
	bad.Info.UID = "00000000-0000-4000-8000-00000000beef"
	bad.RawData = append(bytes.Clone(res.RawData), ' ') // the hash no longer matches
	pub := bus.NewPublisher(4)
	for _, r := range []*events.RawResource{&good, &bad} {
		data, err := r.Encode(events.Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		env, err := events.EnvelopeFor(bus.Prefix(), "issue", &events.RevisionRecord{Data: data}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	snk, err := sink.Open(ctx, "disk:"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	reg := prometheus.NewRegistry()
	m, err := replicate.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	w, err := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: "hashes", Logger: log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Applied != 2 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v: both revisions are written", st)
	}
	if got := counterValue(t, reg, "specstar_sink_data_hash_mismatches_total"); got != 1 {
		t.Errorf("specstar_sink_data_hash_mismatches_total = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "data_hash does not match") || !strings.Contains(logs.String(), res.Info.RevisionID) {
		t.Errorf("no warning naming revision %s:\n%s", res.Info.RevisionID, logs.String())
	}
}

// counterValue is the sum of a counter family's series in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestRecordsLargerThanAMessage (issue 12, item 7): a revision or meta
// larger than the server's max payload (1 MiB by default) could not be
// replicated at all: the publish failed with "maximum payload exceeded",
// and a live tail meeting one would fail forever. Such a record now goes
// through the object store, as large blobs do, and arrives intact.
func TestRecordsLargerThanAMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()

	meta, res := firstMetaAndRevision(t)
	big := *res
	big.Info.UID = "00000000-0000-4000-8000-0000000b1600"
	big.Info.RevisionID = meta.ResourceID + ":99"
	big.Info.ResourceID = meta.ResourceID
	big.RawData = []byte(`{"title":"` + strings.Repeat("x", 3<<20) + `"}`)
	big.Info.DataHash = events.Some(dedup.DataHash(big.RawData))
	bigMeta := *meta
	bigMeta.IndexedData = events.Some[events.Value](events.Map{{Key: "pad", Value: strings.Repeat("y", 2<<20)}})

	pub := bus.NewPublisher(4)
	var records []events.Record
	for _, r := range []interface {
		Encode(events.Encoding) ([]byte, error)
	}{&bigMeta, &big} {
		data, err := r.Encode(events.Msgpack)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r.(*events.ResourceMeta); ok {
			records = append(records, &events.MetaRecord{Data: data})
		} else {
			records = append(records, &events.RevisionRecord{Data: data})
		}
	}
	for _, rec := range records {
		env, err := events.EnvelopeFor(bus.Prefix(), "issue", rec, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, env); err != nil {
			t.Fatalf("publish a %d-byte %s: %v", len(env.Payload), rec.Tag(), err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	snk, err := sink.Open(ctx, "disk:"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer snk.Close()
	cfg := replicate.DefaultConfig()
	cfg.UntilDrained = true
	w, err := replicate.NewWorker(bus, snk, replicate.Options{Config: cfg, Name: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Applied != 2 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v, want both large records applied", st)
	}
	rd := snk.(sink.Reader)
	gotMeta, err := rd.Meta(ctx, "issue", meta.ResourceID)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := gotMeta.Encode(events.Msgpack)
	b, _ := bigMeta.Encode(events.Msgpack)
	if !bytes.Equal(a, b) {
		t.Errorf("the large meta came back different (%d bytes, want %d)", len(a), len(b))
	}
	_, data, err := rd.Revision(ctx, "issue", big.Info.ResourceID, big.Info.RevisionID, big.Info.SchemaVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, big.RawData) {
		t.Errorf("the large revision came back different (%d bytes, want %d)", len(data), len(big.RawData))
	}
}

// firstMetaAndRevision are the first ResourceMeta and RawResource of
// small.acbak, an archive SpecStar wrote.
func firstMetaAndRevision(t *testing.T) (*events.ResourceMeta, *events.RawResource) {
	t.Helper()
	f, err := os.Open(testfixtures.Path(t, "small.acbak"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var meta *events.ResourceMeta
	var res *events.RawResource
	for fr, err := range acbak.NewReader(f, acbak.Options{}).All() {
		if err != nil {
			t.Fatal(err)
		}
		switch r := fr.Record.(type) {
		case *events.MetaRecord:
			if meta == nil {
				if meta, err = r.Meta(); err != nil {
					t.Fatal(err)
				}
			}
		case *events.RevisionRecord:
			if res == nil {
				if res, err = r.Resource(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if meta == nil || res == nil {
		t.Fatal("small.acbak holds no meta or no revision")
	}
	return meta, res
}
