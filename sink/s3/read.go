package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/specstar/replicator/dedup"
	"github.com/specstar/replicator/events"
	"github.com/specstar/replicator/sink/internal/store"
)

// Meta always fails with an error wrapping fs.ErrNotExist: S3 holds no
// metas (see ApplyMeta); it exists so that an S3 can be verified like any
// sink.
func (s *Sink) Meta(ctx context.Context, model, resourceID string) (*events.ResourceMeta, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("sink: s3 holds no metas (model %q, resource %q): %w", model, resourceID, fs.ErrNotExist)
}

// Revision reads one revision through its uid index object, returning its
// RevisionInfo and payload bytes, so a store can be verified against an
// archive. The error wraps fs.ErrNotExist if the index object or the store
// objects it names are missing.
func (s *Sink) Revision(ctx context.Context, model, resourceID, revisionID string, schemaVersion events.Opt[string]) (*events.RevisionInfo, []byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, err
	}
	if err := store.CheckRevisionKey(model, resourceID, revisionID, schemaVersion); err != nil {
		return nil, nil, err
	}
	key := s.indexKey(model, resourceID, revisionID, schemaVersion)
	uid, err := s.indexUID(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	res, err := s.readStore(ctx, model, uid)
	if err != nil {
		return nil, nil, err
	}
	return &res.Info, res.RawData, nil
}

// indexUID reads the uid an index object names; a missing object wraps
// fs.ErrNotExist, one not holding a uid is an error.
func (s *Sink) indexUID(ctx context.Context, key string) (string, error) {
	b, ok, err := s.getSmall(ctx, s.opts.Bucket, key, maxS3IndexObject)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("sink: s3 index %s: %w", objURL(s.opts.Bucket, key), fs.ErrNotExist)
	}
	uid := strings.TrimSpace(string(b))
	if !store.CanonicalUUID(uid) {
		return "", fmt.Errorf("sink: s3 index %s holds %q, not a uid", objURL(s.opts.Bucket, key), b)
	}
	return uid, nil
}

// readStore reads store/{uid}/info and store/{uid}/data; a missing one
// wraps fs.ErrNotExist.
func (s *Sink) readStore(ctx context.Context, model, uid string) (*events.RawResource, error) {
	bucket := s.opts.Bucket
	infoKey, dataKey := s.storeKey(model, uid, "info"), s.storeKey(model, uid, "data")
	infoBytes, ok, err := s.getSmall(ctx, bucket, infoKey, maxS3InfoObject)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("sink: s3 revision info %s: %w", objURL(bucket, infoKey), fs.ErrNotExist)
	}
	info, err := events.DecodeRevisionInfo(s.encoding(), infoBytes)
	if err != nil {
		return nil, fmt.Errorf("sink: s3 revision info %s: %w", objURL(bucket, infoKey), err)
	}
	data, ok, err := s.getSmall(ctx, bucket, dataKey, maxS3DataObject)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("sink: s3 revision data %s: %w", objURL(bucket, dataKey), fs.ErrNotExist)
	}
	if data == nil {
		data = []byte{}
	}
	return &events.RawResource{Info: *info, RawData: data}, nil
}

// OpenBlob opens a stored blob: its Binary without Data (FileID, Size and
// ContentType, "" when the object has none) and a reader streaming the
// bytes, which the caller closes. The error wraps fs.ErrNotExist if the
// blob is absent.
func (s *Sink) OpenBlob(ctx context.Context, fileID string) (*events.Binary, io.ReadCloser, error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, err
	}
	if fileID == "" {
		return nil, nil, store.Invalid(`blob ""`, "empty file_id")
	}
	bucket, key := s.opts.BlobBucket, s.blobKey(fileID)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if isNoSuchKey(err) {
			return nil, nil, fmt.Errorf("sink: s3 blob %s: %w", objURL(bucket, key), fs.ErrNotExist)
		}
		return nil, nil, fmt.Errorf("sink: s3 get %s: %w", objURL(bucket, key), err)
	}
	return blobOf(fileID, out.ContentLength, storedContentType(out.ContentType, out.Metadata)), out.Body, nil
}

func blobOf(fileID string, size *int64, contentType string) *events.Binary {
	return &events.Binary{
		FileID:      events.Some(fileID),
		Size:        events.Some(aws.ToInt64(size)),
		ContentType: events.Some(contentType),
	}
}

// ResourceRevisions yields every revision of one resource, in key order of
// its index objects ({rid}/{revision_id}/{p_sv}/uid), so that a resource
// can be compared or exported without a meta store. Fetches run
// concurrently (bounded by Concurrency). A revision that cannot be read
// is yielded as an error (wrapping fs.ErrNotExist when an object is
// missing) and the walk goes on.
func (s *Sink) ResourceRevisions(ctx context.Context, model, resourceID string) iter.Seq2[*events.RawResource, error] {
	return func(yield func(*events.RawResource, error) bool) {
		for lr, err := range s.ListRevisions(ctx, model, resourceID, nil) {
			if !yield(lr.Revision, err) {
				return
			}
		}
	}
}

// ListedRevision is one revision ListRevisions read, with its index
// object's key and ETag (which change when the index names another uid).
type ListedRevision struct {
	Key, ETag     string
	RevisionID    string             // from the key
	SchemaVersion events.Opt[string] // from the key
	Revision      *events.RawResource
}

// ListRevisions is ResourceRevisions for a live source: skip, if not nil,
// is asked about every index object (key, ETag, and the revision id and
// schema version its key names) before it is read, and a revision it
// says the caller already holds costs nothing beyond the one listing. A
// source follows a resource on every change of it, and re-reading its
// whole history each time would cost three requests per old revision.
func (s *Sink) ListRevisions(ctx context.Context, model, resourceID string,
	skip func(lr ListedRevision) bool) iter.Seq2[ListedRevision, error] {
	return func(yield func(ListedRevision, error) bool) {
		if err := s.check(ctx); err != nil {
			yield(ListedRevision{}, err)
			return
		}
		if err := store.CheckModel(model); err != nil {
			yield(ListedRevision{}, err)
			return
		}
		if err := store.CheckResourceID(resourceID); err != nil {
			yield(ListedRevision{}, err)
			return
		}
		dir := s.resourceDir(model, resourceID)
		errStop := errors.New("stop")
		err := orderedFetch(ctx, s.opts.Concurrency,
			func(ctx context.Context, emit func(ListedRevision) error) error {
				return s.listObjects(ctx, s.opts.Bucket, dir, func(o types.Object) error {
					key := aws.ToString(o.Key)
					parts := strings.Split(strings.TrimPrefix(key, dir), "/")
					if len(parts) != 3 || parts[2] != "uid" {
						return nil // not an index object
					}
					lr := ListedRevision{Key: key, ETag: aws.ToString(o.ETag), RevisionID: parts[0]}
					switch {
					case parts[1] == "no_ver":
					case strings.HasPrefix(parts[1], "v_"):
						lr.SchemaVersion = events.Some(strings.TrimPrefix(parts[1], "v_"))
					default:
						return nil // not a schema-version entry
					}
					if skip != nil && skip(lr) {
						return nil
					}
					return emit(lr)
				})
			},
			func(ctx context.Context, lr ListedRevision) (result[ListedRevision], error) {
				uid, err := s.indexUID(ctx, lr.Key)
				if err != nil {
					return result[ListedRevision]{v: lr, err: err}, nil
				}
				lr.Revision, err = s.readStore(ctx, model, uid)
				return result[ListedRevision]{v: lr, err: err}, nil
			},
			func(r result[ListedRevision]) error {
				if !yield(r.v, r.err) {
					return errStop
				}
				return nil
			})
		if err != nil && !errors.Is(err, errStop) {
			yield(ListedRevision{}, err)
		}
	}
}

// Models lists the models that have a resource store under a Prefix
// holding "{model}" (keys under {prefix}resources/store/), sorted, so a
// whole deployment can be walked. Without "{model}" in Prefix it is an
// error: the models share one store and cannot be told apart.
func (s *Sink) Models(ctx context.Context) ([]string, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	i := strings.Index(s.opts.Prefix, modelPlaceholder)
	if i < 0 {
		return nil, fmt.Errorf("sink: s3 %s: prefix %q has no %s, so models cannot be listed", s, s.opts.Prefix, modelPlaceholder)
	}
	before := s.opts.Prefix[:i]
	// The model ends at the first "/" after it, which is in the rest of
	// the prefix or in "resources/" (models never contain "/").
	after := s.opts.Prefix[i+len(modelPlaceholder):] + "resources/"
	after = after[:strings.Index(after, "/")+1]
	var models []string
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.opts.Bucket), Prefix: aws.String(before), Delimiter: aws.String("/"),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("sink: s3 list %s: %w", objURL(s.opts.Bucket, before), err)
		}
		for _, cp := range page.CommonPrefixes {
			name, ok := strings.CutSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), before), after)
			if !ok || store.CheckModel(name) != nil {
				continue
			}
			has, err := s.hasObjects(ctx, s.opts.Bucket, s.modelPrefix(name)+"resources/store/")
			if err != nil {
				return nil, err
			}
			if has {
				models = append(models, name)
			}
		}
	}
	slices.Sort(models)
	return models, nil
}

// hasObjects reports whether any object has the prefix.
func (s *Sink) hasObjects(ctx context.Context, bucket, prefix string) (bool, error) {
	out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket: aws.String(bucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(1),
	})
	if err != nil {
		return false, fmt.Errorf("sink: s3 list %s: %w", objURL(bucket, prefix), err)
	}
	return len(out.Contents) > 0, nil
}

// WalkRevisions calls fn for every revision in a model's resource store:
// one paginated listing of {prefix}resources/store/, info and data fetched
// by Concurrency workers a bounded window ahead, fn called in listing
// (uid) order from one goroutine. Store entries lacking info or data
// (a write in progress, a purge half-way) are skipped. An error from fn
// stops the walk and is returned.
func (s *Sink) WalkRevisions(ctx context.Context, model string, fn func(*events.RawResource) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := store.CheckModel(model); err != nil {
		return err
	}
	storePrefix := s.modelPrefix(model) + "resources/store/"
	return orderedFetch(ctx, s.opts.Concurrency,
		func(ctx context.Context, emit func(string) error) error {
			// data and info of one uid are adjacent in key order.
			cur, seen := "", 0
			flush := func() error {
				if cur != "" && seen == 3 {
					return emit(cur)
				}
				return nil
			}
			err := s.listObjects(ctx, s.opts.Bucket, storePrefix, func(o types.Object) error {
				uid, name, ok := strings.Cut(strings.TrimPrefix(aws.ToString(o.Key), storePrefix), "/")
				if !ok || !store.CanonicalUUID(uid) {
					return nil
				}
				if uid != cur {
					if err := flush(); err != nil {
						return err
					}
					cur, seen = uid, 0
				}
				switch name {
				case "data":
					seen |= 1
				case "info":
					seen |= 2
				}
				return nil
			})
			if err != nil {
				return err
			}
			return flush()
		},
		func(ctx context.Context, uid string) (*events.RawResource, error) {
			res, err := s.readStore(ctx, model, uid)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil // removed since the listing
			}
			return res, err
		},
		func(res *events.RawResource) error {
			if res == nil {
				return nil
			}
			return fn(res)
		})
}

// WalkBlobs calls fn for every blob under the blob prefix, in key order,
// with its Binary (FileID, Size, ContentType from a HEAD, fetched
// concurrently a bounded window ahead) and a function opening its bytes.
// Upload sessions (_sessions/, _uploads/) and any key that is not a
// 32-hex file_id are skipped. An error from fn stops the walk and is
// returned.
func (s *Sink) WalkBlobs(ctx context.Context, fn func(b *events.Binary, open func(context.Context) (io.ReadCloser, error)) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	bucket, prefix := s.opts.BlobBucket, s.opts.BlobPrefix
	return orderedFetch(ctx, s.opts.Concurrency,
		func(ctx context.Context, emit func(string) error) error {
			return s.listObjects(ctx, bucket, prefix, func(o types.Object) error {
				id := strings.TrimPrefix(aws.ToString(o.Key), prefix)
				if !dedup.ValidFileID(id) {
					return nil // _sessions/, _uploads/, anything else
				}
				return emit(id)
			})
		},
		func(ctx context.Context, id string) (*events.Binary, error) {
			h, err := s.head(ctx, bucket, s.blobKey(id))
			if err != nil || h == nil {
				return nil, err // nil: removed since the listing
			}
			return blobOf(id, h.ContentLength, storedContentType(h.ContentType, h.Metadata)), nil
		},
		func(b *events.Binary) error {
			if b == nil {
				return nil
			}
			return fn(b, func(ctx context.Context) (io.ReadCloser, error) {
				_, body, err := s.OpenBlob(ctx, b.FileID.Value)
				return body, err
			})
		})
}

// AllRevisions yields every index object ({rid}/{revision_id}/{p_sv}/uid
// under resources/resource/) of every model's resource store, listed
// model by model when the prefix holds "{model}", else once with Model ""
// (one store shared by all models), so that a forced restore can find
// revisions no event wrote. Only keys are listed; nothing is read.
func (s *Sink) AllRevisions(ctx context.Context) iter.Seq2[store.RevisionRef, error] {
	return func(yield func(store.RevisionRef, error) bool) {
		if err := s.check(ctx); err != nil {
			yield(store.RevisionRef{}, err)
			return
		}
		models := []string{""}
		if strings.Contains(s.opts.Prefix, modelPlaceholder) {
			var err error
			if models, err = s.Models(ctx); err != nil {
				yield(store.RevisionRef{}, err)
				return
			}
		}
		errStop := errors.New("stop")
		for _, model := range models {
			dir := s.modelPrefix(model) + "resources/resource/"
			err := s.listObjects(ctx, s.opts.Bucket, dir, func(o types.Object) error {
				parts := strings.Split(strings.TrimPrefix(aws.ToString(o.Key), dir), "/")
				if len(parts) != 4 || parts[3] != "uid" {
					return nil // not an index object
				}
				ref := store.RevisionRef{Model: model, ResourceID: parts[0], RevisionID: parts[1]}
				switch {
				case parts[2] == "no_ver":
				case strings.HasPrefix(parts[2], "v_"):
					ref.SchemaVersion = events.Some(strings.TrimPrefix(parts[2], "v_"))
				default:
					return nil
				}
				if !yield(ref, nil) {
					return errStop
				}
				return nil
			})
			if errors.Is(err, errStop) {
				return
			}
			if err != nil {
				yield(store.RevisionRef{}, err)
				return
			}
		}
	}
}

// BlobIDs yields the file ids of the blobs under the blob prefix, in key
// order (upload sessions and keys that are not a file_id skipped). Only
// keys are listed.
func (s *Sink) BlobIDs(ctx context.Context) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := s.check(ctx); err != nil {
			yield("", err)
			return
		}
		errStop := errors.New("stop")
		bucket, prefix := s.opts.BlobBucket, s.opts.BlobPrefix
		err := s.listObjects(ctx, bucket, prefix, func(o types.Object) error {
			if id := strings.TrimPrefix(aws.ToString(o.Key), prefix); dedup.ValidFileID(id) && !yield(id, nil) {
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield("", err)
		}
	}
}
