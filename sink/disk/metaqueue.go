package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// A meta decided Written is not written at once but queued, and Flush
// writes the queue: under a live load a resource is updated many times
// per batch, and each update's meta replaces the last one's, so only the
// batch's newest meta of a resource reaches the disk (one file
// replacement, with its fsync and rename, instead of one per update).
// Nothing is acked before Flush returns, so a crash loses only what is
// redelivered; readers of the tree see a batch's metas no earlier than
// its revisions, as SpecStar writes them (revision, then meta).

// queuedMeta is a resource's newest meta of the batch, not yet written.
type queuedMeta struct {
	dir, name string
	encoded   []byte
	onDisk    bool // a meta file existed when it was decided: replace it
}

// flushMetaParallel is how many queued metas Flush writes at once
// (concurrent fsyncs share the file system's journal commits).
const flushMetaParallel = 16

// With sink.Overlapper (worker.go overlaps a batch's Flush with the next
// batch's Apply calls) a queue has two parts: Seal moves what was decided
// until then into sealedMetas, which FlushSealed writes while new
// decisions go into metaQueue. A lookup sees metaQueue first, then
// sealedMetas, then the file, so every decision starts from the newest
// meta whatever the flush has written yet. A sealed meta is written, and
// taken off, under its resource's lock, so a purge holding that lock
// either finds it still queued (and drops it unwritten) or finds the file.

// With sink.Overlapper (the worker overlaps a batch's flush with the next
// batch's Apply calls) a queue has two parts: Seal moves what was decided
// until then into sealedMetas, which FlushSealed writes while new
// decisions go into metaQueue. A lookup sees metaQueue first, then
// sealedMetas, then the file, so every decision starts from the newest
// meta whatever the flush has written yet. A sealed meta is written, and
// taken off, under its resource's lock, so a purge holding that lock
// either finds it still queued (and drops it unwritten) or finds the file.

// queuedMetaOf is the queued meta of key (model + "\x00" + resource id),
// the newest decided and not yet written, or nil; sealed says it waits in
// the sealed part, to be written before anything queued after it. The
// caller holds the resource's lock.
func (d *Sink) queuedMetaOf(key string) (q *queuedMeta, sealed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if q := d.metaQueue[key]; q != nil {
		return q, false
	}
	if q := d.sealedMetas[key]; q != nil {
		return q, true
	}
	return nil, false
}

// queueMeta queues m as key's newest meta (replacing one queued before).
// The caller holds the resource's lock.
func (d *Sink) queueMeta(key string, m *queuedMeta) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.metaQueue[key] = m
}

// dropQueuedMeta takes key's queued metas off both parts of the queue (a
// purge), so that none of them is written. The caller holds the
// resource's lock.
func (d *Sink) dropQueuedMeta(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.metaQueue, key)
	delete(d.sealedMetas, key)
}

// currentMeta is what a decision about key's meta starts from: the queued
// meta, or else the file at dir/name (nil if there is none); onDisk says
// whether a file will be there to replace when the decision is written (a
// sealed meta is written before it).
func (d *Sink) currentMeta(key, dir, name string) (encoded []byte, onDisk bool, err error) {
	if q, sealed := d.queuedMetaOf(key); q != nil {
		return q.encoded, q.onDisk || sealed, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("sink: read meta: %w", err)
	}
	return b, true, nil
}

// Seal ends a batch (sink.Overlapper): the metas queued and the
// directories dirtied until now are what the next FlushSealed writes and
// makes durable; what is applied from now on waits for the next Seal, or
// a Flush.
func (d *Sink) Seal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, q := range d.metaQueue {
		d.sealedMetas[key] = q // decided after the sealed one: newer
	}
	d.metaQueue = map[string]*queuedMeta{}
	for dir := range d.dirty {
		d.sealedDirty[dir] = struct{}{}
	}
	d.dirty = map[string]struct{}{}
}

// writeSealedMetas writes every sealed meta (new files linked in whole,
// existing ones replaced by rename), flushMetaParallel at a time, each
// under its resource's lock, and returns the directories the writes
// touched, to be made durable. What fails to be written stays sealed for
// the next flush.
func (d *Sink) writeSealedMetas() (touched []string, err error) {
	d.mu.Lock()
	sealed := make(map[string]*queuedMeta, len(d.sealedMetas))
	for key, q := range d.sealedMetas {
		sealed[key] = q
	}
	d.mu.Unlock()
	if len(sealed) == 0 {
		return nil, nil
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		dirs     = map[string]struct{}{}
	)
	sem := make(chan struct{}, flushMetaParallel)
	for key, q := range sealed {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			written, err := d.writeSealedMeta(key, q)
			mu.Lock()
			defer mu.Unlock()
			for _, dir := range written {
				dirs[dir] = struct{}{}
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	for dir := range dirs {
		touched = append(touched, dir)
	}
	return touched, firstErr
}

// writeSealedMeta writes key's sealed meta q, unless a purge dropped it
// meanwhile, and takes it off the sealed part; it returns the directories
// the write touched.
func (d *Sink) writeSealedMeta(key string, q *queuedMeta) ([]string, error) {
	unlock := d.locks.Lock(key)
	defer unlock()
	d.mu.Lock()
	still := d.sealedMetas[key] == q
	d.mu.Unlock()
	if !still {
		return nil, nil
	}
	dirs, err := d.writeMeta(q)
	if err != nil {
		return dirs, err
	}
	d.mu.Lock()
	delete(d.sealedMetas, key)
	d.mu.Unlock()
	return dirs, nil
}

// writeMeta writes one queued meta file and returns the directories that
// gained an entry.
func (d *Sink) writeMeta(q *queuedMeta) ([]string, error) {
	created, err := d.ensureDir(q.dir)
	if err != nil {
		return created, err
	}
	if q.onDisk {
		err = d.writeFileAtomic(q.dir, q.name, q.encoded)
	} else {
		err = d.writeFileNew(q.dir, q.name, q.encoded)
	}
	return append(created, q.dir), err
}
