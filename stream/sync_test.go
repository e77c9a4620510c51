package stream

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestEmbeddedServerSyncPolicy: the embedded server fsyncs before every
// acknowledgement unless an interval is chosen (nats-server's own default,
// 2m, lets a power cut take what it acknowledged: Jepsen, NATS 2.12.1).
func TestEmbeddedServerSyncPolicy(t *testing.T) {
	for _, tc := range []struct {
		name         string
		interval     time.Duration
		wantAlways   bool
		wantInterval time.Duration
	}{
		{"default", 0, true, 0},
		{"interval", 2 * time.Minute, false, 2 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			b, err := Open(ctx, Config{DataDir: t.TempDir(), SyncInterval: tc.interval}, log)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if b.emb == nil {
				t.Fatal("Open did not host the embedded server")
			}
			js := b.emb.srv.JetStreamConfig()
			if js == nil {
				t.Fatal("the embedded server runs without JetStream")
			}
			if js.SyncAlways != tc.wantAlways || (!tc.wantAlways && js.SyncInterval != tc.wantInterval) {
				t.Errorf("sync_always %v, sync_interval %v; want %v, %v", js.SyncAlways, js.SyncInterval, tc.wantAlways, tc.wantInterval)
			}
		})
	}
}
