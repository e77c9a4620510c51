package s3

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// ApplyMeta does nothing and returns Skipped: SpecStar keeps metas in its
// meta store (Postgres in the Postgres+S3 factory), never in S3, so an S3
// sink is paired with a meta sink for a whole deployment.
func (s *Sink) ApplyMeta(ctx context.Context, model string, meta *events.ResourceMeta) (store.Outcome, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	return store.Skipped, nil
}

// ApplyRevision materializes one revision, idempotently, with the disk
// sink's rules (see Disk.ApplyRevision): store/{uid}/info and
// store/{uid}/data first, the index object of (resource_id, revision_id,
// schema_version) last, so that no reader sees an index object naming
// missing data.
//
// A revision already stored identically is Unchanged and costs no PUT
// (a GET of the index object and of info, a HEAD of data). When the uid is
// stored with different content the newer stays (a migration is newer
// than what it migrated, otherwise the later updated_time wins); the same
// rule picks between two uids claiming one index object, and the loser is
// Stale with nothing written.
func (s *Sink) ApplyRevision(ctx context.Context, model string, res *events.RawResource) (store.Outcome, error) {
	if err := s.writable(ctx); err != nil {
		return 0, err
	}
	if res == nil {
		return 0, store.Invalid("revision", "nil")
	}
	info := &res.Info
	if err := store.CheckRevisionInfo(model, info); err != nil {
		return 0, err
	}
	indexKey := s.indexKey(model, info.ResourceID, info.RevisionID, info.SchemaVersion)
	if err := checkKeyLen(fmt.Sprintf("revision %q", info.RevisionID), indexKey); err != nil {
		return 0, err
	}
	if err := checkKeyLen(fmt.Sprintf("model %q", model), s.storeKey(model, info.UID, "data")); err != nil {
		return 0, err
	}
	enc := s.encoding()
	infoBytes, err := info.Encode(enc)
	if err != nil {
		return 0, store.Invalidf(fmt.Sprintf("revision %q", info.UID), "info cannot be encoded in %v: %v", enc, err)
	}
	unlock := s.locks.Lock(model + "\x00" + info.ResourceID)
	defer unlock()

	cur, err := s.readIndex(ctx, indexKey)
	if err != nil {
		return 0, err
	}
	if cur != "" && cur != info.UID {
		other, otherBytes, err := s.readStoredInfo(ctx, model, cur)
		if err != nil {
			return 0, err
		}
		if other != nil && !store.Supersedes(info, infoBytes, other, otherBytes) {
			return store.Stale, nil
		}
	}
	wrote, storeNewer, err := s.writeStore(ctx, model, info, infoBytes, res.RawData, cur == info.UID)
	if err != nil {
		return 0, err
	}
	if cur != info.UID {
		if _, err := s.put(ctx, s.opts.Bucket, indexKey, []byte(info.UID), "", false); err != nil {
			return 0, err
		}
		wrote = true
	}
	switch {
	case wrote:
		return store.Written, nil
	case storeNewer:
		return store.Stale, nil
	}
	return store.Unchanged, nil
}

// readIndex reads the uid an index object names: "" if there is none or
// it does not hold a canonical uid (a broken object, replaced).
func (s *Sink) readIndex(ctx context.Context, key string) (string, error) {
	b, ok, err := s.getSmall(ctx, s.opts.Bucket, key, maxS3IndexObject)
	if err != nil || !ok {
		return "", err
	}
	uid := strings.TrimSpace(string(b))
	if !store.CanonicalUUID(uid) {
		return "", nil
	}
	return uid, nil
}

// readStoredInfo reads store/{uid}/info; a missing or undecodable one
// gives nil without error.
func (s *Sink) readStoredInfo(ctx context.Context, model, uid string) (*events.RevisionInfo, []byte, error) {
	b, ok, err := s.getSmall(ctx, s.opts.Bucket, s.storeKey(model, uid, "info"), maxS3InfoObject)
	if err != nil || !ok {
		return nil, nil, err
	}
	info, err := events.DecodeRevisionInfo(s.encoding(), b)
	if err != nil {
		return nil, nil, nil
	}
	return info, b, nil
}

// writeStore makes store/{uid} hold this revision unless it holds a newer
// one (storeNewer). indexed says an index object already names the uid,
// so the store is expected to exist and is read rather than created.
//
// info decides: it is created with If-None-Match (or HEAD, per
// Conditional); whoever creates it owns the entry and writes data. If it
// exists, it is compared: identical means only a missing or cut data
// object is rewritten; different means the newer of the two stays, data
// and info both rewritten when it is ours.
func (s *Sink) writeStore(ctx context.Context, model string, info *events.RevisionInfo, infoBytes, data []byte, indexed bool) (wrote, storeNewer bool, err error) {
	bucket := s.opts.Bucket
	infoKey, dataKey := s.storeKey(model, info.UID, "info"), s.storeKey(model, info.UID, "data")
	var (
		stored  []byte
		present bool
	)
	if indexed {
		if stored, present, err = s.getSmall(ctx, bucket, infoKey, maxS3InfoObject); err != nil {
			return false, false, err
		}
	}
	if !present {
		created, err := s.put(ctx, bucket, infoKey, infoBytes, "", true)
		if err != nil {
			return false, false, err
		}
		if created {
			if _, err := s.put(ctx, bucket, dataKey, data, "", false); err != nil {
				return false, false, err
			}
			return true, false, nil
		}
		if stored, present, err = s.getSmall(ctx, bucket, infoKey, maxS3InfoObject); err != nil {
			return false, false, err
		}
		if !present {
			return false, false, fmt.Errorf("sink: s3 %s: %w", objURL(bucket, infoKey), errChangedConcurrently)
		}
	}
	if bytes.Equal(stored, infoBytes) {
		h, err := s.head(ctx, bucket, dataKey)
		if err != nil {
			return false, false, err
		}
		if h != nil && h.ContentLength != nil && *h.ContentLength == int64(len(data)) {
			return false, false, nil
		}
		if _, err := s.put(ctx, bucket, dataKey, data, "", false); err != nil {
			return false, false, err
		}
		return true, false, nil
	}
	// A stored info that does not decode is a broken entry (no SpecStar
	// reader could use it): it is replaced.
	old, derr := events.DecodeRevisionInfo(s.encoding(), stored)
	if derr == nil {
		// The uid may be another resource's: created once, the info
		// object tells, whichever writer (or process) got there first.
		if err := store.CheckUIDHolder(info, old); err != nil {
			return false, false, err
		}
		if !store.Supersedes(info, infoBytes, old, stored) {
			return false, true, nil
		}
	}
	if _, err := s.put(ctx, bucket, dataKey, data, "", false); err != nil {
		return false, false, err
	}
	if _, err := s.put(ctx, bucket, infoKey, infoBytes, "", false); err != nil {
		return false, false, err
	}
	return true, false, nil
}
