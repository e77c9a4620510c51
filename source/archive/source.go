package archive

import (
	"context"
	"fmt"
	"iter"
	"os"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/source/internal/base"
)

// Source reads an archive file as a source of truth; it exists so that an
// archive is compared with a sink the same way a live deployment is.
type Source struct {
	// Path is the archive file.
	Path string
	// Options are the reader's (Size is set from the file).
	Options acbak.Options
	// Progress (may be nil) is called after each frame with the frames
	// and bytes read so far.
	Progress func(frames int, offset int64)
}

var _ base.Source = (*Source)(nil)

// Records yields the archive's metas, revisions and blobs in order, each
// with its model, its frame's position and its exact bytes; the file is
// open only while iterating.
func (a *Source) Records(ctx context.Context) iter.Seq2[base.Record, error] {
	return func(yield func(base.Record, error) bool) {
		f, err := os.Open(a.Path)
		if err != nil {
			yield(base.Record{}, err)
			return
		}
		defer f.Close()
		opts := a.Options
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			opts.Size = st.Size()
		}
		r := acbak.NewReader(f, opts)
		model := ""
		for fr, err := range r.All() {
			if err != nil {
				yield(base.Record{}, err)
				return
			}
			if a.Progress != nil {
				a.Progress(r.Frames(), r.Offset())
			}
			switch rec := fr.Record.(type) {
			case *events.ModelStartRecord:
				model = rec.ModelName
			case *events.MetaRecord, *events.RevisionRecord, *events.BlobRecord:
				if !yield(base.Record{Model: model, Record: rec, Where: fmt.Sprintf("frame %d at offset %d", fr.Index, fr.Offset), Payload: fr.Payload}, nil) {
					return
				}
			}
		}
	}
}
