package s3

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/specstar/replicator/sink/internal/lease"
)

// TestRestoreLease (issue 33 item 3): writers of one prefix share it, a
// restore (Exclusive) holds it alone: it is refused while another
// process writes there, a writer's writes are refused while it holds it,
// each refusal naming the holder; readers are never refused; closing the
// holder frees the prefix, and a lease its holder left behind (killed)
// holds nothing once it expired.
func TestRestoreLease(t *testing.T) {
	for _, prefix := range []string{"", "app/{model}/"} {
		t.Run("prefix "+prefix, func(t *testing.T) { testRestoreLease(t, Options{Prefix: prefix, leaseTTL: 3 * time.Second}) })
	}
}

func testRestoreLease(t *testing.T, opts Options) {
	ctx := t.Context()
	e := newS3Env(t)
	const bucket = "lease"
	refused := func(err error, role string) bool {
		var he *lease.HeldError
		return errors.As(err, &he) && he.Holder.Role == role && strings.Contains(err.Error(), "s3://"+bucket+"/")
	}
	write := func(s *Sink) error { return s.Mark(ctx, "w") }

	w1, w2 := e.open(t, bucket, opts), e.open(t, bucket, opts)
	reader := e.open(t, bucket, opts)
	for _, w := range []*Sink{w1, w2} {
		if err := write(w); err != nil {
			t.Fatalf("two writers of one prefix: %v, want both to write", err)
		}
	}
	if err := w1.Exclusive(ctx); !refused(err, "writer") {
		t.Errorf("a restore's Exclusive while another writer writes the prefix: %v, want a HeldError naming the writer", err)
	}
	w2.Close()
	if err := w1.Exclusive(ctx); err != nil {
		t.Fatalf("Exclusive once the other writer closed: %v", err)
	}
	if err := write(w1); err != nil {
		t.Errorf("the restore's own write: %v", err)
	}
	w3 := e.open(t, bucket, opts)
	if err := write(w3); !refused(err, "restore") {
		t.Errorf("a writer writing the prefix a restore holds: %v, want a HeldError naming the restore", err)
	}
	if _, err := reader.Marked(ctx, "w"); err != nil {
		t.Errorf("a reader of the prefix a restore holds: %v, want it read", err)
	}
	if err := e.open(t, bucket, opts).Exclusive(ctx); !refused(err, "restore") {
		t.Errorf("a second restore of the prefix: %v, want a HeldError naming the first", err)
	}
	w1.Close()
	if err := write(w3); err != nil {
		t.Errorf("a writer once the restore closed: %v", err)
	}
	w3.Close()

	// A restore killed while it held the prefix: its lease holds until it
	// expires, and nothing after.
	putLease := func(name, role string, expires time.Time) {
		b, _ := json.Marshal(lease.Holder{ID: "killed", Role: role, Host: "gone", PID: 1, Since: expires.Add(-time.Minute), Expires: expires})
		key := leaseStore{w1}.key(name)
		if _, err := e.raw.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(b)}); err != nil {
			t.Fatal(err)
		}
	}
	putLease("restore", "restore", time.Now().Add(time.Hour))
	if err := write(e.open(t, bucket, opts)); !refused(err, "restore") {
		t.Errorf("a writer while a killed restore's lease is live: %v, want a HeldError", err)
	}
	putLease("restore", "restore", time.Now().Add(-time.Second))
	w4 := e.open(t, bucket, opts)
	if err := write(w4); err != nil {
		t.Errorf("a writer once a killed restore's lease expired: %v", err)
	}
	w4.Close()
	putLease("writers/killed", "writer", time.Now().Add(-time.Second))
	r := e.open(t, bucket, opts)
	if err := r.Exclusive(ctx); err != nil {
		t.Errorf("a restore once a killed writer's lease expired (and the restore's): %v", err)
	}
	r.Close()
	var left []string
	for _, k := range e.keys(t, bucket) {
		if strings.Contains(k, "leases/") {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Errorf("leases left behind once every holder closed: %v", left)
	}
}

// TestLeaseRenewed: a holder that stays open past the TTL keeps its
// lease, renewed in the background, so a restore is still refused.
func TestLeaseRenewed(t *testing.T) {
	ctx := t.Context()
	e := newS3Env(t)
	const bucket = "renew"
	w := e.open(t, bucket, Options{leaseTTL: 600 * time.Millisecond})
	if err := w.Mark(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	// Past three TTLs by the lease's own clock: only renewals keep it.
	first := leaseExpiry(ctx, t, e, bucket, w)
	for leaseExpiry(ctx, t, e, bucket, w).Before(first.Add(1800 * time.Millisecond)) {
		if err := ctx.Err(); err != nil {
			t.Fatal("the writer's lease was never renewed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := e.open(t, bucket, Options{}).Exclusive(ctx); err == nil {
		t.Error("a restore's Exclusive while a writer has been open for longer than its lease lasts: nil, want refused")
	}
}

// leaseExpiry reads the expiry of w's writer lease from the server.
func leaseExpiry(ctx context.Context, t *testing.T, e *s3Env, bucket string, w *Sink) time.Time {
	t.Helper()
	names, err := leaseStore{w}.List(ctx, "writers/")
	if err != nil || len(names) != 1 {
		t.Fatalf("writer leases: %v %v, want one", names, err)
	}
	b, _, _, err := leaseStore{w}.Get(ctx, names[0])
	if err != nil {
		t.Fatal(err)
	}
	var h lease.Holder
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	return h.Expires
}
