package archive

import (
	"context"
	"os"
	"testing"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// fakePublisher keeps what Replay sends; messages hold up to limit bytes.
type fakePublisher struct {
	limit int
	envs  []*events.Envelope
	blobs map[string]int
}

func (f *fakePublisher) Publish(_ context.Context, env *events.Envelope) error {
	f.envs = append(f.envs, env)
	return nil
}

func (f *fakePublisher) FitsInline(n int) bool { return n <= f.limit }

func (f *fakePublisher) PutBlob(_ context.Context, fileID string, data []byte) error {
	f.blobs[fileID] = len(data)
	return nil
}

// TestReplay: every meta, revision and blob of an archive is published in
// order; a blob too large for one message goes to the object store and
// travels as a BlobRefRecord.
func TestReplay(t *testing.T) {
	f, err := os.Open(testfixtures.Path(t, "blobs.acbak"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pub := &fakePublisher{limit: 64 << 10, blobs: map[string]int{}}
	st, err := Replay(context.Background(), f, acbak.Options{}, "specstar", "BLOBS", pub, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Metas != 5 || st.Revisions != 6 || st.Blobs != 5 || st.LargeBlobs != 1 || st.Unknown != 0 || len(pub.envs) != 16 {
		t.Errorf("stats %+v, %d events published", st, len(pub.envs))
	}
	if len(pub.blobs) != 1 {
		t.Errorf("%d blobs put in the object store, want the 1 MiB one", len(pub.blobs))
	}
	for id, n := range pub.blobs {
		if n != 1<<20 {
			t.Errorf("blob %s: %d bytes in the object store, want 1 MiB", id, n)
		}
	}
}
