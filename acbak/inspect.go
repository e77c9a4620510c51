package acbak

import (
	"context"
	"io"
	"sort"

	"github.com/specstar/replicator/events"
)

// Summary is what `writer inspect` reports about an archive.
type Summary struct {
	Version   int64          `json:"version"`
	Frames    int            `json:"frames"`
	Bytes     int64          `json:"bytes"`
	Records   map[string]int `json:"records"` // tag -> count, unknown tags included
	Models    []ModelSummary `json:"models"`
	Encodings []string       `json:"payload_encodings"` // across all models
	Warnings  []string       `json:"warnings,omitempty"`
}

// ModelSummary describes one model section.
type ModelSummary struct {
	Name           string   `json:"name"`
	Metas          int      `json:"metas"`
	Revisions      int      `json:"revisions"`
	Blobs          int      `json:"blobs"`
	BlobBytes      int64    `json:"blob_bytes"`
	SchemaVersions []string `json:"schema_versions"` // "null" for None
	Encodings      []string `json:"payload_encodings"`
}

// PayloadEncoding guesses a stored payload's encoding: SpecStar payloads
// are Structs, so JSON text starts with '{' and msgpack with a map header.
func PayloadEncoding(raw []byte) string {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{', '[', '"':
			return "json"
		}
		return "msgpack"
	}
	return "empty"
}

// ProgressFunc is told how far a pass over an archive has come.
type ProgressFunc func(frames int, offset int64)

// Inspect reads a whole archive and summarizes it. Unknown tags are counted
// in Records. It stops at the first contract error, returning what it had.
func Inspect(ctx context.Context, in io.Reader, opts Options, progress ProgressFunc) (*Summary, error) {
	opts.KeepUnknown = true
	r := NewReader(in, opts)
	s := &Summary{Records: map[string]int{}}
	var cur *ModelSummary
	seen := map[string]map[string]bool{} // per model: schema versions, encodings
	encAll := map[string]bool{}
	add := func(kind, v string) {
		key := cur.Name + "\x00" + kind
		if seen[key] == nil {
			seen[key] = map[string]bool{}
		}
		if !seen[key][v] {
			seen[key][v] = true
			if kind == "sv" {
				cur.SchemaVersions = append(cur.SchemaVersions, v)
			} else {
				cur.Encodings = append(cur.Encodings, v)
				encAll[v] = true
			}
		}
	}
	var err error
	for f, ferr := range r.All() {
		if ferr != nil {
			err = ferr
			break
		}
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		s.Records[f.Record.Tag()]++
		switch rec := f.Record.(type) {
		case *events.HeaderRecord:
			s.Version = rec.Version
		case *events.ModelStartRecord:
			s.Models = append(s.Models, ModelSummary{Name: rec.ModelName, SchemaVersions: []string{}, Encodings: []string{}})
			cur = &s.Models[len(s.Models)-1]
		case *events.ModelEndRecord:
			cur = nil
		case *events.MetaRecord:
			cur.Metas++
		case *events.RevisionRecord:
			cur.Revisions++
			if res, derr := rec.Resource(); derr == nil {
				sv := "null"
				if res.Info.SchemaVersion.IsSet() {
					sv = res.Info.SchemaVersion.Value
				}
				add("sv", sv)
				add("enc", PayloadEncoding(res.RawData))
			}
		case *events.BlobRecord:
			cur.Blobs++
			cur.BlobBytes += int64(len(rec.BlobData))
		}
		if progress != nil && f.Index%1024 == 0 {
			progress(r.Frames(), r.Offset())
		}
	}
	s.Frames, s.Bytes = r.Frames(), r.Offset()
	for _, w := range r.Warnings() {
		s.Warnings = append(s.Warnings, w.Error())
	}
	for e := range encAll {
		s.Encodings = append(s.Encodings, e)
	}
	sort.Strings(s.Encodings)
	if s.Encodings == nil {
		s.Encodings = []string{}
	}
	return s, err
}
