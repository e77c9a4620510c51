package main

// Helpers of TestLiveMirrorPostgresS3ToDisk: the Go writer playing
// SpecStar on a Postgres+S3 deployment, the ledger of what it wrote, and
// the checks of the disk mirror against that ledger.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/internal/testsupport/s3test"
	"github.com/specstar/replicator/internal/testsupport/specstarpg"
	"github.com/specstar/replicator/sink/disk"
)

// e2eModels are the models the e2e writer writes, alternately.
var e2eModels = [2]string{"doc", "issue"}

// e2eBuild builds the writer and replicator binaries into a directory of
// t, so the processes under test are the real commands.
func e2eBuild(t *testing.T) (writerBin, replBin string) {
	t.Helper()
	return buildBinary(t, "."), buildBinary(t, "../replicator")
}

// e2eS3URL names an S3 store at endpoint as the writer and the replicator
// take it (credentials come from the AWS environment).
func e2eS3URL(bucket, prefix, endpoint, region string) string {
	return "s3://" + bucket + "/" + prefix + "?endpoint=" + url.QueryEscape(endpoint) + "&region=" + region + "&path_style=true"
}

// e2eRevision is one revision the writer stored.
type e2eRevision struct {
	model, rid, revisionID, uid string
	sv                          events.Opt[string]
	data                        []byte
}

// e2eResource is a resource's state after the writer's last write.
type e2eResource struct {
	model, rid, current string
	sv                  events.Opt[string]
	total               int64
}

// e2eLedger is everything the writer stored successfully: what the mirror
// must hold, no more and no less.
type e2eLedger struct {
	mu        sync.Mutex
	resources map[string]*e2eResource // model "\x00" rid
	revisions []e2eRevision
	blobs     map[string]specstarpg.Blob // file_id: every blob a stored payload references
}

func newE2ELedger() *e2eLedger {
	return &e2eLedger{resources: map[string]*e2eResource{}, blobs: map[string]specstarpg.Blob{}}
}

func (l *e2eLedger) record(wr *specstarpg.Written, refs []specstarpg.Blob) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resources[wr.Model+"\x00"+wr.Meta.ResourceID] = &e2eResource{model: wr.Model, rid: wr.Meta.ResourceID,
		current: wr.Meta.CurrentRevisionID, sv: wr.Meta.SchemaVersion, total: wr.Meta.TotalRevisionCount}
	l.revisions = append(l.revisions, e2eRevision{model: wr.Model, rid: wr.Info.ResourceID, revisionID: wr.Info.RevisionID,
		uid: wr.Info.UID, sv: wr.Info.SchemaVersion, data: wr.Data})
	for _, b := range refs {
		l.blobs[b.FileID] = b
	}
}

// counts are the ledger's totals: resources (metas), revisions, blobs.
func (l *e2eLedger) counts() (int, int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.resources), len(l.revisions), len(l.blobs)
}

// hasBlobSizes reports whether the payloads reference a blob of each of
// the sizes.
func (l *e2eLedger) hasBlobSizes(sizes ...int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	have := map[int64]bool{}
	for _, b := range l.blobs {
		have[b.Size] = true
	}
	for _, n := range sizes {
		if !have[n] {
			return false
		}
	}
	return true
}

// e2eWriter plays SpecStar: creates and updates over two models, doc
// payloads referencing blobs (0 B, 1 B, a fresh small one now and then,
// and the large ones it is given), until stopped. Writes go straight to
// the S3 server, never through the mirror's proxy.
type e2eWriter struct {
	w      *specstarpg.Writer
	ledger *e2eLedger
	pause  atomic.Bool // true: no write is started (S3 is down for SpecStar too)
	writes atomic.Int64
	// large are blobs to put and reference, one per doc write, in order:
	// each returns the reader of its bytes and its content type.
	large chan func() (io.Reader, string)
	rids  map[string][]string // model -> resource ids created
	svs   map[string]events.Opt[string]
	zero  specstarpg.Blob
	one   specstarpg.Blob
	rng   *mrand.Rand
}

func newE2EWriter(ctx context.Context, w *specstarpg.Writer) (*e2eWriter, error) {
	x := &e2eWriter{w: w, ledger: newE2ELedger(), large: make(chan func() (io.Reader, string), 4),
		rids: map[string][]string{}, svs: map[string]events.Opt[string]{}, rng: mrand.New(mrand.NewPCG(5, 7))}
	var err error
	if x.zero, err = w.PutBlobBytes(ctx, []byte{}, ""); err != nil {
		return nil, err
	}
	if x.one, err = w.PutBlobBytes(ctx, []byte{'x'}, "text/plain"); err != nil {
		return nil, err
	}
	return x, nil
}

// run writes until stop is closed, one write every interval; it returns
// the first failed write (SpecStar's S3 is never unavailable to it while
// it writes, so none may fail).
func (x *e2eWriter) run(ctx context.Context, stop <-chan struct{}, interval time.Duration) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		case <-time.After(interval):
		}
		if x.pause.Load() {
			continue
		}
		if err := x.writeOne(ctx, i); err != nil {
			return err
		}
		x.writes.Add(1)
	}
}

func (x *e2eWriter) writeOne(ctx context.Context, i int) error {
	model := e2eModels[i%2]
	rids := x.rids[model]
	var rid string
	create := len(rids) < 8 || (i/2)%2 == 0 // every other write of a model creates
	if create {
		rid = fmt.Sprintf("%s:%04d", model, len(rids))
		if len(rids)%5 == 0 {
			x.svs[model+rid] = events.Some("v1")
		}
	} else {
		rid = rids[x.rng.IntN(len(rids))]
	}
	wr := specstarpg.Write{SchemaVersion: x.svs[model+rid]}
	var value events.Value
	var refs []specstarpg.Blob
	if model == "doc" {
		refs = []specstarpg.Blob{x.zero, x.one}
		if i%10 == 0 {
			b, err := x.w.PutBlobBytes(ctx, []byte(fmt.Sprintf("note %d of %s", i, rid)), "text/plain")
			if err != nil {
				return err
			}
			refs = append(refs, b)
		}
		select {
		case open := <-x.large:
			r, ct := open()
			b, err := x.w.PutBlob(ctx, r, ct)
			if err != nil {
				return err
			}
			refs = append(refs, b)
		default:
		}
		files := make([]any, len(refs))
		for k, b := range refs {
			files[k] = b.Value()
		}
		value = events.Struct{Declared: 3, Fields: []events.StructField{
			{Name: "title", Value: rid}, {Name: "n", Value: int64(i)}, {Name: "files", Value: files}}}
	} else {
		value = payload(rid, i)
	}
	var written *specstarpg.Written
	var err error
	if create {
		written, err = x.w.Create(ctx, model, rid, value, wr)
	} else {
		written, err = x.w.Update(ctx, model, rid, value, wr)
	}
	if err != nil {
		return fmt.Errorf("write %d (%s %s): %w", i, model, rid, err)
	}
	if create {
		x.rids[model] = append(rids, rid)
	}
	x.ledger.record(written, refs)
	return nil
}

// e2eBytes is a deterministic stream of n bytes (never held whole).
func e2eBytes(seed byte, n int64) io.Reader {
	return io.LimitReader(&e2ePRNG{mrand.NewChaCha8([32]byte{seed})}, n)
}

type e2ePRNG struct{ c *mrand.ChaCha8 }

func (p *e2ePRNG) Read(b []byte) (int, error) { return p.c.Read(b) }

// e2eVerified is what `replicator verify` reported.
type e2eVerified struct {
	equal                  bool
	metas, revisions, blob int
	out                    string
}

var e2eVerifyLine = regexp.MustCompile(`: (equal|DIFFERENT): (\d+) metas, (\d+) revisions, (\d+) blobs compared`)

// e2eVerify runs `replicator verify` of the mirror against the live
// deployment (its S3 reached directly, not through the proxy).
func e2eVerify(ctx context.Context, replBin string, env []string, args ...string) e2eVerified {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, replBin, append([]string{"verify"}, args...)...)
	cmd.Env = env
	out, _ := cmd.CombinedOutput()
	v := e2eVerified{out: string(out)}
	if m := e2eVerifyLine.FindStringSubmatch(v.out); m != nil {
		v.equal = m[1] == "equal" && cmd.ProcessState != nil && cmd.ProcessState.Success()
		v.metas, _ = strconv.Atoi(m[2])
		v.revisions, _ = strconv.Atoi(m[3])
		v.blob, _ = strconv.Atoi(m[4])
	}
	return v
}

// e2eCheckMirror checks the mirror at root against the ledger, file by
// file, as SpecStar's disk factory (json encoding, files meta store)
// would open it: nothing lost (each resource's meta, each revision's
// index entry and store files, each referenced blob), nothing duplicated
// (exactly as many meta files, index entries, store directories and blob
// files as were written), and every index entry naming a store directory
// with data and info.
func e2eCheckMirror(t *testing.T, root string, l *e2eLedger) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	wantMetas, wantRevs := map[string]int{}, map[string]int{}
	for _, r := range l.resources {
		wantMetas[r.model]++
		path := filepath.Join(root, r.model, "meta", r.rid+".data")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("lost: resource %s %s has no meta file: %v", r.model, r.rid, err)
			continue
		}
		m, err := events.DecodeResourceMeta(events.JSON, b)
		if err != nil {
			t.Errorf("meta file %s does not decode as a json ResourceMeta: %v", path, err)
			continue
		}
		if m.ResourceID != r.rid || m.CurrentRevisionID != r.current || m.TotalRevisionCount != r.total || !e2eSameVersion(m.SchemaVersion, r.sv) {
			t.Errorf("meta %s: current %s of %d revisions (schema %v), want %s of %d (schema %v)",
				path, m.CurrentRevisionID, m.TotalRevisionCount, m.SchemaVersion, r.current, r.total, r.sv)
		}
	}
	for _, rev := range l.revisions {
		wantRevs[rev.model]++
		slot := filepath.Join(root, rev.model, "data", "resource", rev.rid, rev.revisionID, schemaDirName(rev.sv))
		uid, err := os.ReadFile(filepath.Join(slot, "uid"))
		if err != nil {
			t.Errorf("lost: revision %s has no index entry: %v", rev.revisionID, err)
			continue
		}
		if string(uid) != rev.uid {
			t.Errorf("index entry %s names uid %q, the writer stored %q", slot, uid, rev.uid)
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, rev.model, "data", "store", rev.uid, "data"))
		if err != nil || !bytes.Equal(data, rev.data) {
			t.Errorf("revision %s: store data %d bytes (%v), want the %d bytes written", rev.revisionID, len(data), err, len(rev.data))
		}
	}

	// The whole tree, entry by entry.
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "."): // the sink's staging directory
		case name == "_blobs":
			e2eCheckBlobs(t, filepath.Join(root, name), l.blobs)
		case wantMetas[name] > 0:
			metas, revs, stores := e2eCheckModel(t, filepath.Join(root, name))
			if metas != wantMetas[name] || revs != wantRevs[name] || stores != wantRevs[name] {
				t.Errorf("model %s: %d meta files, %d index entries, %d store directories; the writer stored %d resources and %d revisions",
					name, metas, revs, stores, wantMetas[name], wantRevs[name])
			}
		default:
			t.Errorf("the mirror holds %s, which the writer never wrote", name)
		}
	}
	if len(l.blobs) > 0 {
		if _, err := os.Stat(filepath.Join(root, "_blobs")); err != nil {
			t.Errorf("lost: the mirror has no blob store: %v", err)
		}
	}
}

// schemaDirName is DiskResourceStore's p_schema_version.
func schemaDirName(sv events.Opt[string]) string {
	if sv.IsSet() {
		return "v_" + sv.Value
	}
	return "no_ver"
}

// e2eCheckModel walks one model directory: every meta file decodes, every
// index entry resource/{rid}/{rev}/{no_ver|v_x} is a directory whose uid
// file names a store/{uid} directory holding data and an info that
// decodes to that revision. It returns the counts found.
func e2eCheckModel(t *testing.T, dir string) (metas, revs, stores int) {
	t.Helper()
	metaFiles, err := filepath.Glob(filepath.Join(dir, "meta", "*.data"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range metaFiles {
		b, err := os.ReadFile(p)
		if err == nil {
			_, err = events.DecodeResourceMeta(events.JSON, b)
		}
		if err != nil {
			t.Errorf("meta file %s: %v", p, err)
		}
	}
	slots, err := filepath.Glob(filepath.Join(dir, "data", "resource", "*", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, slot := range slots {
		rev := filepath.Base(filepath.Dir(slot))
		rid := filepath.Base(filepath.Dir(filepath.Dir(slot)))
		psv := filepath.Base(slot)
		if psv != "no_ver" && !strings.HasPrefix(psv, "v_") {
			t.Errorf("index entry %s: not a schema version directory", slot)
			continue
		}
		uid, err := os.ReadFile(filepath.Join(slot, "uid"))
		if err != nil {
			t.Errorf("index entry %s: %v (want a directory holding a uid file)", slot, err)
			continue
		}
		store := filepath.Join(dir, "data", "store", string(uid))
		if _, err := os.Stat(filepath.Join(store, "data")); err != nil {
			t.Errorf("index entry %s names %s, which has no data: %v", slot, store, err)
		}
		b, err := os.ReadFile(filepath.Join(store, "info"))
		if err != nil {
			t.Errorf("index entry %s names %s, which has no info: %v", slot, store, err)
			continue
		}
		info, err := events.DecodeRevisionInfo(events.JSON, b)
		if err != nil {
			t.Errorf("%s/info does not decode as a json RevisionInfo: %v", store, err)
			continue
		}
		if info.UID != string(uid) || info.ResourceID != rid || info.RevisionID != rev || schemaDirName(info.SchemaVersion) != psv {
			t.Errorf("index entry %s names a store entry of %s %s (%s, uid %s)", slot, info.ResourceID, info.RevisionID,
				schemaDirName(info.SchemaVersion), info.UID)
		}
	}
	storeDirs, err := os.ReadDir(filepath.Join(dir, "data", "store"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range storeDirs {
		if !strings.HasPrefix(e.Name(), ".") {
			stores++
		}
	}
	return len(metaFiles), len(slots), stores
}

// e2eCheckBlobs opens each blob file as DiskBlobStore does: one per
// referenced blob, each hashing to its file_id with the size and content
// type the writer gave (S3's default where it gave none, as SpecStar reads it).
func e2eCheckBlobs(t *testing.T, dir string, want map[string]specstarpg.Blob) {
	t.Helper()
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasPrefix(f.Name(), ".") {
			continue
		}
		n++
		if _, ok := want[f.Name()]; !ok {
			t.Errorf("blob file %s: no payload references it", f.Name())
		}
	}
	if n != len(want) {
		t.Errorf("%d blob files, want %d (one per referenced blob)", n, len(want))
	}
	store, err := disk.OpenBlobStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for id, b := range want {
		bin, r, err := store.OpenBlob(context.Background(), id)
		if err != nil {
			t.Errorf("lost: blob %s (%d bytes): %v", id, b.Size, err)
			continue
		}
		h := dedup.NewFileIDHasher()
		got, err := io.Copy(h, r)
		r.Close()
		ct := b.ContentType
		if ct == "" {
			ct = s3test.DefaultContentType // what SpecStar reads back for a blob it stored untyped
		}
		if err != nil || got != b.Size || dedup.HexSum(h) != id || bin.Size.Value != b.Size || bin.ContentType.Value != ct {
			t.Errorf("blob %s: %d bytes hashing to %s, size %d, type %q (%v); want %d bytes, type %q",
				id, got, dedup.HexSum(h), bin.Size.Value, bin.ContentType.Value, err, b.Size, ct)
		}
	}
}

// e2eSameVersion compares two schema versions, None (or UNSET) equal to None.
func e2eSameVersion(a, b events.Opt[string]) bool {
	return a.IsSet() == b.IsSet() && (!a.IsSet() || a.Value == b.Value)
}
