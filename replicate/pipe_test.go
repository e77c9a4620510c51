package replicate_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/compare"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
	"github.com/specstar/replicator/replicate"
	"github.com/specstar/replicator/sink"
	srcarchive "github.com/specstar/replicator/source/archive"
	"github.com/specstar/replicator/stream"
)

// countingPublisher is the archive replay's view of a Paced publisher
// that checks, before each event, how far the sink lags behind.
type countingPublisher struct {
	*replicate.Paced
	w             *replicate.Worker
	sent          int64
	maxAhead      int64
	sentBytes     int64
	maxAheadBytes int64
	maxPayload    int64
}

func (p *countingPublisher) Publish(ctx context.Context, env *events.Envelope) error {
	p.maxAhead = max(p.maxAhead, p.sent-p.w.Stats().Applied)
	p.maxAheadBytes = max(p.maxAheadBytes, p.sentBytes-p.w.Stats().Bytes)
	p.sent++
	p.sentBytes += int64(len(env.Payload))
	p.maxPayload = max(p.maxPayload, int64(len(env.Payload)))
	return p.Paced.Publish(ctx, env)
}

// TestPipeAppliesWhilePublishingWithinAhead: Pipe replays medium.acbak
// (2,240 events) while the worker drains it into a disk sink, never more
// than ahead (in events, or in payload bytes plus the one event that
// crosses the bound) in front of it; afterwards the sink verifies equal
// to the archive.
func TestPipeAppliesWhilePublishingWithinAhead(t *testing.T) {
	for _, ahead := range []replicate.Ahead{{Events: 64}, {Bytes: 32 << 10}, {}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, log)
		if err != nil {
			t.Fatalf("embedded JetStream: %v", err)
		}
		defer bus.Close()
		dir := t.TempDir()
		d, err := sink.Open(ctx, "disk:"+dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		cfg := replicate.DefaultConfig()
		cfg.Batch = 16
		w, err := replicate.NewWorker(bus, d, replicate.Options{Config: cfg, Name: "pipetest", Display: dir, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		archive := testfixtures.Path(t, "medium.acbak")
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var cp *countingPublisher
		replayErr, runErr := replicate.Pipe(ctx, w, bus.NewPublisher(8), ahead, func(ctx context.Context, pub *replicate.Paced) error {
			cp = &countingPublisher{Paced: pub, w: w}
			_, err := srcarchive.Replay(ctx, f, acbak.Options{}, bus.Prefix(), bus.BlobBucket(), cp, nil)
			return err
		})
		if replayErr != nil || runErr != nil {
			t.Fatalf("ahead %+v: replay %v, run %v", ahead, replayErr, runErr)
		}
		if ahead.Events > 0 && cp.maxAhead > int64(ahead.Events) {
			t.Errorf("ahead %+v: the replay ran %d events ahead of the sink", ahead, cp.maxAhead)
		}
		if ahead.Bytes > 0 && cp.maxAheadBytes > ahead.Bytes+cp.maxPayload {
			t.Errorf("ahead %+v: the replay ran %d payload bytes ahead of the sink (largest payload %d)", ahead, cp.maxAheadBytes, cp.maxPayload)
		}
		if ahead == (replicate.Ahead{}) && (cp.maxAhead <= 64 || cp.maxAheadBytes <= 64<<10) {
			t.Errorf("unpaced: the replay never ran more than %d events, %d bytes ahead; the paced cases prove nothing", cp.maxAhead, cp.maxAheadBytes)
		}
		if st := w.Stats(); st.Applied != cp.sent {
			t.Errorf("ahead %+v: %d events published, %d applied", ahead, cp.sent, st.Applied)
		}
		res, err := compare.Verify(ctx, &srcarchive.Source{Path: archive}, d.(sink.Reader), compare.VerifyOptions{Out: testWriter{t}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Metas == 0 || res.Revisions == 0 || !res.Equal() {
			t.Fatalf("ahead %+v: verify %+v", ahead, *res)
		}
	}
}

// TestPipeStopsTheWorkerWhenTheReplayFails: a replay that fails returns
// its error and stops the worker (no hang, no error of the worker's).
func TestPipeStopsTheWorkerWhenTheReplayFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bus, err := stream.Open(ctx, stream.Config{DataDir: t.TempDir()}, log)
	if err != nil {
		t.Fatalf("embedded JetStream: %v", err)
	}
	defer bus.Close()
	d, err := sink.Open(ctx, "disk:"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	w, err := replicate.NewWorker(bus, d, replicate.Options{Config: replicate.DefaultConfig(), Name: "pipefail", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("archive cut short")
	replayErr, runErr := replicate.Pipe(ctx, w, bus.NewPublisher(8), replicate.Ahead{Events: 64}, func(context.Context, *replicate.Paced) error { return boom })
	if !errors.Is(replayErr, boom) || runErr != nil {
		t.Fatalf("replay %v, run %v; want the replay's error alone", replayErr, runErr)
	}
}
