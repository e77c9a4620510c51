package s3

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/zeebo/xxh3"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// s3PurgeDir holds, below a model's prefix, the list of store entries a
// purge in progress still has to delete, one object per resource.
// SpecStar reads only {prefix}resources/, so it never sees it; a purge
// that crashed half-way leaves its list there and the next purge of that
// resource finishes the job.
const s3PurgeDir = ".specstar-purge/"

// ApplyPurge removes a permanently deleted resource from the resource
// store: every index object whose revision was last updated at or before
// purgedAt (a later one belongs to a re-creation and stays), then the
// store objects those index objects named, so that no reader ever sees an
// index object naming missing data. Nothing to delete is Unchanged;
// anything deleted is Written.
//
// S3 holds no metas, so unlike the disk sink it cannot tell from the meta
// that the resource was re-created after the purge: that is decided per
// revision, by updated_time. Known limit, as on disk: no tombstone is
// kept, so an old revision event redelivered after the purge re-creates
// what it carries; a later redelivery of the purge removes it again.
func (s *Sink) ApplyPurge(ctx context.Context, model, resourceID string, purgedAt events.Time) (store.Outcome, error) {
	if err := s.writable(ctx); err != nil {
		return 0, err
	}
	if err := store.CheckModel(model); err != nil {
		return 0, err
	}
	if err := store.CheckResourceID(resourceID); err != nil {
		return 0, err
	}
	unlock := s.locks.Lock(model + "\x00" + resourceID)
	defer unlock()

	grave := s.purgeListKey(model, resourceID)
	removed, err := s.buryPurgeList(ctx, model, resourceID, grave)
	if err != nil {
		return 0, err
	}
	entries, err := s.indexEntries(ctx, model, resourceID)
	if err != nil {
		return 0, err
	}
	var doomedKeys, doomedUIDs []string
	for _, e := range entries {
		if e.uid != "" {
			info, _, err := s.readStoredInfo(ctx, model, e.uid)
			if err != nil {
				return 0, err
			}
			if info != nil && info.ResourceID == resourceID && info.UpdatedTime.Instant().After(purgedAt.Instant()) {
				continue // a re-creation's revision
			}
			doomedUIDs = append(doomedUIDs, e.uid)
		}
		doomedKeys = append(doomedKeys, e.key)
	}
	if len(doomedKeys) == 0 {
		if removed {
			return store.Written, nil
		}
		return store.Unchanged, nil
	}
	// The list first, so that a crash after the index objects are gone
	// still knows which store entries to delete.
	if len(doomedUIDs) > 0 {
		if _, err := s.put(ctx, s.opts.Bucket, grave, []byte(strings.Join(doomedUIDs, "\n")), "", false); err != nil {
			return 0, fmt.Errorf("sink: s3 purge %q: %w", resourceID, err)
		}
	}
	if err := s.deleteAll(ctx, s.opts.Bucket, doomedKeys); err != nil {
		return 0, fmt.Errorf("sink: s3 purge %q: %w", resourceID, err)
	}
	if _, err := s.buryPurgeList(ctx, model, resourceID, grave); err != nil {
		return 0, err
	}
	return store.Written, nil
}

// purgeListKey is where a purge of the resource lists its store entries.
func (s *Sink) purgeListKey(model, resourceID string) string {
	return fmt.Sprintf("%s%s%x", s.modelPrefix(model), s3PurgeDir, xxh3.HashString128(resourceID).Bytes())
}

// indexEntry is one index object of a resource and the uid it names ("" if
// it names none).
type indexEntry struct {
	key, uid string
}

// indexEntries lists a resource's index objects with their uids.
func (s *Sink) indexEntries(ctx context.Context, model, resourceID string) ([]indexEntry, error) {
	dir := s.resourceDir(model, resourceID)
	var entries []indexEntry
	err := s.listObjects(ctx, s.opts.Bucket, dir, func(o types.Object) error {
		key := aws.ToString(o.Key)
		if parts := strings.Split(strings.TrimPrefix(key, dir), "/"); len(parts) != 3 || parts[2] != "uid" {
			return nil // not SpecStar's; left alone
		}
		uid, err := s.readIndex(ctx, key)
		if err != nil {
			return err
		}
		entries = append(entries, indexEntry{key: key, uid: uid})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sink: s3 purge %q: %w", resourceID, err)
	}
	return entries, nil
}

// buryPurgeList deletes the store entries a purge list names (those of
// resourceID, or with no readable info, and not named by an index object
// still there), then the list. It reports whether there was a list.
func (s *Sink) buryPurgeList(ctx context.Context, model, resourceID, grave string) (bool, error) {
	b, ok, err := s.getSmall(ctx, s.opts.Bucket, grave, maxS3InfoObject)
	if err != nil || !ok {
		return false, err
	}
	live := map[string]bool{}
	entries, err := s.indexEntries(ctx, model, resourceID)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		live[e.uid] = true
	}
	var keys []string
	for _, uid := range strings.Fields(string(b)) {
		if !store.CanonicalUUID(uid) || live[uid] {
			continue
		}
		info, _, err := s.readStoredInfo(ctx, model, uid)
		if err != nil {
			return false, err
		}
		if info != nil && info.ResourceID != resourceID {
			continue // another resource's: not ours to delete
		}
		keys = append(keys, s.storeKey(model, uid, "data"), s.storeKey(model, uid, "info"))
	}
	if err := s.deleteAll(ctx, s.opts.Bucket, keys); err != nil {
		return false, fmt.Errorf("sink: s3 purge %q: %w", resourceID, err)
	}
	if err := s.deleteAll(ctx, s.opts.Bucket, []string{grave}); err != nil {
		return false, fmt.Errorf("sink: s3 purge %q: %w", resourceID, err)
	}
	return true, nil
}

// deleteAll deletes the keys, Concurrency at a time; a missing key is no
// error. It returns the first error.
func (s *Sink) deleteAll(ctx context.Context, bucket string, keys []string) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for _, key := range keys {
		release, err := s.acquire(ctx)
		if err != nil {
			wg.Wait()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
			if err != nil && !isNoSuchKey(err) {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("sink: s3 delete %s: %w", objURL(bucket, key), err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}
