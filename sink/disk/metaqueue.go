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

// queuedMetaOf is the queued meta of key (model + "\x00" + resource id),
// or nil. The caller holds the resource's lock.
func (d *Sink) queuedMetaOf(key string) *queuedMeta {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.metaQueue[key]
}

// queueMeta queues m as key's newest meta (replacing one queued before)
// or, with m nil, takes key's queued meta off the queue (a purge).
func (d *Sink) queueMeta(key string, m *queuedMeta) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m == nil {
		delete(d.metaQueue, key)
		return
	}
	d.metaQueue[key] = m
}

// currentMeta is what a decision about key's meta starts from: the queued
// meta, or else the file at dir/name (nil if there is none); onDisk says
// whether that file exists.
func (d *Sink) currentMeta(key, dir, name string) (encoded []byte, onDisk bool, err error) {
	if q := d.queuedMetaOf(key); q != nil {
		return q.encoded, q.onDisk, nil
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

// writeQueuedMetas writes every queued meta (new files linked in whole,
// existing ones replaced by rename), flushMetaParallel at a time. What
// fails to be written stays queued for the next Flush.
func (d *Sink) writeQueuedMetas() error {
	d.mu.Lock()
	queue := d.metaQueue
	d.metaQueue = map[string]*queuedMeta{}
	d.mu.Unlock()
	if len(queue) == 0 {
		return nil
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		failed   = map[string]*queuedMeta{}
	)
	sem := make(chan struct{}, flushMetaParallel)
	for key, q := range queue {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := d.writeMeta(q); err != nil {
				mu.Lock()
				failed[key] = q
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		d.mu.Lock()
		for key, q := range failed {
			if _, newer := d.metaQueue[key]; !newer {
				d.metaQueue[key] = q
			}
		}
		d.mu.Unlock()
	}
	return firstErr
}

// writeMeta writes one queued meta file.
func (d *Sink) writeMeta(q *queuedMeta) error {
	if _, err := d.ensureDir(q.dir); err != nil {
		return err
	}
	if q.onDisk {
		return d.writeFileAtomic(q.dir, q.name, q.encoded)
	}
	return d.writeFileNew(q.dir, q.name, q.encoded)
}
