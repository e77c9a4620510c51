package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"os"

	"github.com/specstar/replicator/acbak"
	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/deployment"
	"github.com/specstar/replicator/internal/progress"
	"github.com/specstar/replicator/source"
	pgsource "github.com/specstar/replicator/source/postgres"
)

// sinkReader is what verify reads from a sink.
type sinkReader interface {
	Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error)
	Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error)
	OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error)
}

// sourceRecord is one record of the source of truth and where it is.
type sourceRecord = source.Record

// recordSource yields the records a sink should hold. An archive is one;
// the Postgres and S3 sources plug in here.
type recordSource interface {
	Records(ctx context.Context) iter.Seq2[sourceRecord, error]
}

// holds says which kinds of record a sink keeps (a Postgres sink keeps no
// blobs, and revisions only if configured to).
type holds struct{ revisions, blobs bool }

func (s *sinkSpec) holds() holds {
	switch s.kind {
	case "deployment":
		return holds{revisions: s.layers.resources != nil, blobs: s.layers.blobs != nil}
	case "postgres":
		return holds{revisions: s.pg.Revisions}
	}
	return holds{revisions: true, blobs: true}
}

// comparison counts what compareSink found.
type comparison struct {
	Metas, Revisions, Blobs int
	Differences             int
}

// compareSink checks that the sink holds every record of the source, with
// equal bytes: metas and revision infos compared in msgpack, payloads and
// blobs byte for byte. Each difference goes to report.
func compareSink(ctx context.Context, src recordSource, snk sinkReader, h holds, report func(string)) (*comparison, error) {
	c := &comparison{}
	diff := func(where, format string, args ...any) {
		c.Differences++
		report(fmt.Sprintf("%s: %s", where, fmt.Sprintf(format, args...)))
	}
	for sr, err := range src.Records(ctx) {
		if err != nil {
			return c, err
		}
		switch rec := sr.Record.(type) {
		case *events.MetaRecord:
			c.Metas++
			want, err := rec.Meta()
			if err != nil {
				diff(sr.Where, "source meta does not decode: %v", err)
				continue
			}
			got, err := snk.Meta(ctx, sr.Model, want.ResourceID)
			if err != nil {
				diff(sr.Where, "model %q meta %q: %v", sr.Model, want.ResourceID, missingOr(err))
				continue
			}
			if b, err := got.Encode(events.Msgpack); err != nil || !bytes.Equal(b, rec.Data) {
				diff(sr.Where, "model %q meta %q differs (sink: updated %s, %d revisions, current %s; source: updated %s, %d revisions, current %s)",
					sr.Model, want.ResourceID, got.UpdatedTime.Format(), got.TotalRevisionCount, got.CurrentRevisionID,
					want.UpdatedTime.Format(), want.TotalRevisionCount, want.CurrentRevisionID)
			}
		case *events.RevisionRecord:
			if !h.revisions {
				continue
			}
			c.Revisions++
			want, err := rec.Resource()
			if err != nil {
				diff(sr.Where, "source revision does not decode: %v", err)
				continue
			}
			info, data, err := snk.Revision(ctx, sr.Model, want.Info.ResourceID, want.Info.RevisionID, want.Info.SchemaVersion)
			if err != nil {
				diff(sr.Where, "model %q revision %q: %v", sr.Model, want.Info.RevisionID, missingOr(err))
				continue
			}
			got := events.RawResource{Info: *info, RawData: data}
			if !bytes.Equal(data, want.RawData) {
				diff(sr.Where, "model %q revision %q: payload differs (%d bytes in sink, %d in source)", sr.Model, want.Info.RevisionID, len(data), len(want.RawData))
			} else if b, err := got.Encode(events.Msgpack); err != nil || !bytes.Equal(b, rec.Data) {
				diff(sr.Where, "model %q revision %q: info differs (sink uid %s, source uid %s)", sr.Model, want.Info.RevisionID, info.UID, want.Info.UID)
			}
		case *events.BlobRecord:
			if !h.blobs {
				continue
			}
			c.Blobs++
			bin, n, sum, ok := readSinkBlob(ctx, snk, sr.Where, rec.FileID, diff)
			switch {
			case !ok:
			case n != int64(len(rec.BlobData)) || sum != dedup.FileID(rec.BlobData):
				diff(sr.Where, "blob %s: bytes differ (%d in sink, %d in source)", rec.FileID, n, len(rec.BlobData))
			case bin.ContentType.Value != rec.ContentType:
				diff(sr.Where, "blob %s: content type %q in sink, %q in source", rec.FileID, bin.ContentType.Value, rec.ContentType)
			}
		case *events.BlobRefRecord:
			// A live deployment's payload references a blob: the sink's
			// copy must hash to the file_id and have the size and type the
			// reference gives.
			if !h.blobs {
				continue
			}
			c.Blobs++
			bin, n, sum, ok := readSinkBlob(ctx, snk, sr.Where, rec.FileID, diff)
			switch {
			case !ok:
			case sum != rec.FileID:
				diff(sr.Where, "blob %s: the sink's %d bytes do not hash to its file_id", rec.FileID, n)
			case rec.Size >= 0 && n != rec.Size:
				diff(sr.Where, "blob %s: %d bytes in sink, the reference says %d", rec.FileID, n, rec.Size)
			case bin.ContentType.Value != rec.ContentType:
				diff(sr.Where, "blob %s: content type %q in sink, %q in the reference", rec.FileID, bin.ContentType.Value, rec.ContentType)
			}
		}
	}
	return c, nil
}

// readSinkBlob reads a sink's blob through the file_id hasher, for
// compareSink: its Binary, its length and its hash. A blob that cannot be
// opened or read is reported through diff, and ok is false.
func readSinkBlob(ctx context.Context, snk sinkReader, where, fileID string, diff func(where, format string, args ...any)) (bin *events.Binary, n int64, sum string, ok bool) {
	bin, r, err := snk.OpenBlob(ctx, fileID)
	if err != nil {
		diff(where, "blob %s: %v", fileID, missingOr(err))
		return nil, 0, "", false
	}
	defer r.Close()
	h := dedup.NewFileIDHasher()
	if n, err = io.Copy(h, r); err != nil {
		diff(where, "blob %s: reading it: %v", fileID, err)
		return nil, 0, "", false
	}
	return bin, n, dedup.HexSum(h), true
}

func missingOr(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "missing from the sink"
	}
	return err.Error()
}

// comparisonArgs are the flags verify and reconcile share: the sink, and
// the source of truth (an archive, or a live deployment given by URL, by
// name in --config, or as --source plus --source-resources and
// --source-blobs).
type comparisonArgs struct {
	archive, source, sink        string
	sourceResources, sourceBlobs string
	config                       string
	lenient                      bool
}

func (a *comparisonArgs) register(fs *flag.FlagSet) {
	fs.StringVar(&a.archive, "archive", "", "archive holding what the sink should hold")
	fs.StringVar(&a.source, "source", "", "or a live SpecStar deployment: postgres://... (its meta store), or a deployment of --config")
	fs.StringVar(&a.sourceResources, "source-resources", "", "the source deployment's resource store when not in Postgres: s3://bucket/{model}/data/?endpoint=...")
	fs.StringVar(&a.sourceBlobs, "source-blobs", "", "the source deployment's blob store (s3://... or disk:/path): blobs its payloads reference are checked in the sink")
	fs.StringVar(&a.sink, "sink", "", "sink: a URL or a deployment of --config")
	fs.StringVar(&a.config, "config", os.Getenv("SPECSTAR_CONFIG"), "YAML file with named deployments (default $SPECSTAR_CONFIG)")
	fs.BoolVar(&a.lenient, "lenient", false, "read the archive leniently (see writer verify)")
}

// usable reports whether exactly one source and a sink are given.
func (a *comparisonArgs) usable() bool {
	return (a.archive == "") != (a.source == "") && a.sink != ""
}

// openCompared opens the sink to read back and the source of truth that
// verify and reconcile compare; fs, if not nil, gets the config file's
// nats settings. cmd names the command in messages; code is the exit
// status on failure.
func openCompared(ctx context.Context, cmd string, a comparisonArgs, fs *flag.FlagSet, stderr io.Writer, log *slog.Logger) (c *comparisonSetup, code int) {
	var cfg *deployment.Config
	var err error
	if a.config != "" {
		cfg, err = deployment.Load(a.config)
	}
	if err == nil && fs != nil {
		err = cfg.ApplyFlags(fs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
		return nil, exitUsage
	}
	spec, err := sinkNamed(cfg, a.sink)
	if err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
		return nil, exitUsage
	}
	var live *deployment.Deployment
	if a.source != "" {
		d, ok, err := cfg.Lookup(a.source)
		if err != nil {
			fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
			return nil, exitUsage
		}
		if !ok {
			d = deployment.Deployment{Meta: a.source}
			if deployment.Scheme(a.source) == "postgres" && a.sourceResources == "" {
				d.Resources = a.source
				if _, opts, err := pgsource.ParseURL(a.source); err == nil && !opts.Revisions {
					d.Resources = ""
				}
			}
		}
		if a.sourceResources != "" {
			d.Resources = a.sourceResources
		}
		if a.sourceBlobs != "" {
			d.Blobs = a.sourceBlobs
		}
		if d, err = d.Resolved(); err != nil {
			fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
			return nil, exitUsage
		}
		live = &d
	}
	if spec.kind == "disk" {
		if _, err := os.Stat(spec.path); err != nil {
			fmt.Fprintf(stderr, "replicator %s: sink %s: %v\n", cmd, spec.raw, err)
			return nil, exitFailed
		}
	}
	snk, err := spec.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "replicator %s: %v\n", cmd, err)
		return nil, exitFailed
	}
	reader, ok := snk.(sinkReader)
	if !ok {
		snk.Close()
		fmt.Fprintf(stderr, "replicator %s: sink %s cannot be read back\n", cmd, spec.raw)
		return nil, exitFailed
	}
	var size int64
	if st, err := os.Stat(a.archive); err == nil && a.archive != "" {
		size = st.Size()
	}
	c = &comparisonSetup{spec: spec, sink: snk, reader: reader, meter: progress.New(cmd+" "+spec.raw, size, log), from: a.archive}
	c.src = openSource(a.archive, acbak.Options{Lenient: a.lenient}, c.meter, live)
	if live != nil {
		c.from = live.String()
	}
	return c, exitOK
}

// comparisonSetup is what openCompared opened; Close releases the sink.
type comparisonSetup struct {
	spec   *sinkSpec
	sink   applier
	reader sinkReader
	src    recordSource
	from   string // the source, for messages
	meter  *progress.Meter
}

func (c *comparisonSetup) Close() { c.sink.Close() }

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var ca comparisonArgs
	ca.register(fs)
	pos, ok := parse(fs, args, stderr)
	if !ok {
		return exitUsage
	}
	if len(pos) != 0 || !ca.usable() {
		fmt.Fprintln(stderr, "replicator verify: want --archive ARCHIVE or --source DEPLOYMENT, and --sink URL")
		return exitUsage
	}
	cs, code := openCompared(ctx, "verify", ca, nil, stderr, log)
	if code != exitOK {
		return code
	}
	defer cs.Close()
	c, err := compareSink(ctx, cs.src, cs.reader, cs.spec.holds(), func(line string) { fmt.Fprintln(stdout, line) })
	cs.meter.Done()
	if err != nil {
		fmt.Fprintf(stderr, "replicator verify: %s: %v\n", cs.from, err)
		return exitFailed
	}
	verdict := "equal"
	if c.Differences > 0 {
		verdict = "DIFFERENT"
	}
	fmt.Fprintf(stdout, "%s vs %s: %s: %d metas, %d revisions, %d blobs compared, %d differences\n",
		cs.from, cs.spec.raw, verdict, c.Metas, c.Revisions, c.Blobs, c.Differences)
	if c.Differences > 0 {
		return exitFailed
	}
	return exitOK
}
