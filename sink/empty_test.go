package sink_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink"
)

// TestEmpty: a sink is empty while it holds no metas (of the models asked
// about, when some are); a sink that cannot list its metas is an error,
// never taken for empty.
func TestEmpty(t *testing.T) {
	ctx := context.Background()
	withMeta := t.TempDir()
	snk, err := sink.Open(ctx, "disk:"+withMeta)
	if err != nil {
		t.Fatal(err)
	}
	at := events.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := snk.ApplyMeta(ctx, "issue", &events.ResourceMeta{ResourceID: "issue:1", CurrentRevisionID: "issue:1:1", TotalRevisionCount: 1,
		SchemaVersion: events.Null[string](), CreatedTime: at, UpdatedTime: at, CreatedBy: "t", UpdatedBy: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := snk.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	snk.Close()
	for _, c := range []struct {
		name   string
		open   func() sink.Sink
		models []string
		empty  bool
		err    string
	}{
		{"a new disk sink", func() sink.Sink { return open(t, "disk:"+t.TempDir()) }, nil, true, ""},
		{"a disk sink holding a meta", func() sink.Sink { return open(t, "disk:"+withMeta) }, nil, false, ""},
		{"the same, asked about its model", func() sink.Sink { return open(t, "disk:"+withMeta) }, []string{"issue"}, false, ""},
		{"the same, asked about another model", func() sink.Sink { return open(t, "disk:"+withMeta) }, []string{"user"}, true, ""},
		{"a sink that cannot list", func() sink.Sink { return unlisted{} }, nil, false, "cannot list"},
	} {
		s := c.open()
		empty, err := sink.Empty(ctx, s, c.models)
		s.Close()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: Empty = %v, %v; want an error saying %q", c.name, empty, err, c.err)
			}
			continue
		}
		if err != nil || empty != c.empty {
			t.Errorf("%s: Empty = %v, %v; want %v", c.name, empty, err, c.empty)
		}
	}
}

func open(t *testing.T, raw string) sink.Sink {
	t.Helper()
	s, err := sink.Open(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unlisted is a sink that holds something but cannot say what.
type unlisted struct{}

func (unlisted) ApplyMeta(context.Context, string, *events.ResourceMeta) (sink.Outcome, error) {
	return sink.Written, nil
}
func (unlisted) ApplyRevision(context.Context, string, *events.RawResource) (sink.Outcome, error) {
	return sink.Written, nil
}
func (unlisted) ApplyBlob(context.Context, string, int64, string, io.Reader) (sink.Outcome, error) {
	return sink.Written, nil
}
func (unlisted) ApplyPurge(context.Context, string, string, events.Time) (sink.Outcome, error) {
	return sink.Written, nil
}
func (unlisted) Flush(context.Context) error { return nil }
func (unlisted) Close() error                { return nil }
