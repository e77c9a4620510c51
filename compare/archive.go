package compare

import (
	"context"
	"fmt"
	"iter"
	"os"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/events"
)

// Archive is an .acbak file as a Source: its metas, revisions and blobs
// in file order, each with its exact bytes.
type Archive struct {
	Path     string
	Options  acbak.Options                  // Size is filled in from the file when it is a regular one
	Progress func(frames int, offset int64) // called after every frame read, if set
}

// Records reads the archive from its start.
func (a *Archive) Records(ctx context.Context) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		f, err := os.Open(a.Path)
		if err != nil {
			yield(Record{}, err)
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
				yield(Record{}, err)
				return
			}
			if a.Progress != nil {
				a.Progress(r.Frames(), r.Offset())
			}
			switch rec := fr.Record.(type) {
			case *events.ModelStartRecord:
				model = rec.ModelName
			case *events.MetaRecord, *events.RevisionRecord, *events.BlobRecord:
				if !yield(Record{Model: model, Record: rec, Where: fmt.Sprintf("frame %d at offset %d", fr.Index, fr.Offset), Payload: fr.Payload}, nil) {
					return
				}
			}
		}
	}
}
