package specstarpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/events"
)

// S3Target is where the Postgres+S3 factory keeps revisions and blobs; it
// exists so the Writer can produce that deployment with plain PutObject
// calls, independently of our own S3 store.
type S3Target struct {
	// Client talks to the S3 server (endpoint, credentials, path style).
	Client *s3.Client
	// Bucket holds the resource stores.
	Bucket string
	// Prefix of a model's resource store, "{model}" replaced by the model
	// name; "" means "{model}/data/", the factory's.
	Prefix string
	// BlobBucket holds the blob store; "" means Bucket.
	BlobBucket string
	// BlobPrefix comes before every blob's file_id; "" means "blobs/".
	BlobPrefix string
}

func (t *S3Target) withDefaults() (*S3Target, error) {
	if t == nil {
		return nil, nil
	}
	if t.Client == nil || t.Bucket == "" {
		return nil, errors.New("specstarpg: S3 target needs a client and a bucket")
	}
	c := *t
	if c.Prefix == "" {
		c.Prefix = "{model}/data/"
	}
	if c.BlobBucket == "" {
		c.BlobBucket = c.Bucket
	}
	if c.BlobPrefix == "" {
		c.BlobPrefix = "blobs/"
	}
	return &c, nil
}

// ResourcePrefix is the key prefix of a model's resource store, up to and
// including "resources/".
func (t *S3Target) ResourcePrefix(model string) string {
	return strings.ReplaceAll(t.Prefix, "{model}", model) + "resources/"
}

// StoreKey is the key of a revision's "data" or "info" object.
func (t *S3Target) StoreKey(model, uid, name string) string {
	return t.ResourcePrefix(model) + "store/" + uid + "/" + name
}

// IndexKey is the key of the text object holding the uid of
// (resource_id, revision_id, schema_version).
func (t *S3Target) IndexKey(model, rid, revisionID string, sv events.Opt[string]) string {
	psv := "no_ver"
	if sv.IsSet() {
		psv = "v_" + sv.Value
	}
	return t.ResourcePrefix(model) + "resource/" + rid + "/" + revisionID + "/" + psv + "/uid"
}

// BlobKey is the key of a blob's bytes.
func (t *S3Target) BlobKey(fileID string) string { return t.BlobPrefix + fileID }

func (w *Writer) put(ctx context.Context, bucket, key string, body []byte) error {
	_, err := w.s3.Client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", bucket, key, err)
	}
	return nil
}

func (w *Writer) get(ctx context.Context, bucket, key string) ([]byte, error) {
	out, err := w.s3.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
	}
	return b, nil
}

// s3PutRevision writes a revision as S3ResourceStore does: the payload,
// the info, then the index object naming the uid. It returns the keys.
func (w *Writer) s3PutRevision(ctx context.Context, model string, info *events.RevisionInfo, data, infoData []byte) ([]string, error) {
	t := w.s3
	objs := []struct {
		key  string
		body []byte
	}{
		{t.StoreKey(model, info.UID, "data"), data},
		{t.StoreKey(model, info.UID, "info"), infoData},
		{t.IndexKey(model, info.ResourceID, info.RevisionID, info.SchemaVersion), []byte(info.UID)},
	}
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		if err := w.put(ctx, t.Bucket, o.key, o.body); err != nil {
			return keys, err
		}
		keys = append(keys, o.key)
	}
	return keys, nil
}

// s3CurrentInfo reads the stored info of a meta's current revision.
func (w *Writer) s3CurrentInfo(ctx context.Context, model string, meta *events.ResourceMeta) ([]byte, error) {
	t := w.s3
	uid, err := w.get(ctx, t.Bucket, t.IndexKey(model, meta.ResourceID, meta.CurrentRevisionID, meta.SchemaVersion))
	if err != nil {
		return nil, err
	}
	return w.get(ctx, t.Bucket, t.StoreKey(model, strings.TrimSpace(string(uid)), "info"))
}
