package replicate_test

// Regression tests for defects found by the security and reliability
// review (issue 12), kept together so the list stays visible.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testfixtures"
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

	var base *events.ResourceMeta
	f, err := os.Open(testfixtures.Path(t, "small.acbak"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for fr, err := range acbak.NewReader(f, acbak.Options{}).All() {
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := fr.Record.(*events.MetaRecord); ok {
			if base, err = m.Meta(); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
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
