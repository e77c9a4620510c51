package stream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/events"
)

// headroom is what a message needs beyond its payload (headers, protocol).
const headroom = 8 << 10

// PublishStats counts what a Publisher did.
type PublishStats struct {
	Published  int64 // acknowledged by JetStream
	Duplicates int64 // of those, dropped as already stored (same message id)
	Bytes      int64 // payload bytes acknowledged
	BlobsPut   int64 // large blobs written to the object store
	BlobsKept  int64 // large blobs already in the object store
}

// Publisher publishes events asynchronously with at most MaxInflight
// awaiting their acknowledgement, and checks every acknowledgement in
// order. A failed publish is retried synchronously with backoff; the
// deterministic message id makes the retry safe.
type Publisher struct {
	bus     *Bus
	max     int
	ackWait time.Duration // asyncAckWait; shorter in tests
	pending []inflight
	Stats   PublishStats
}

type inflight struct {
	f    jetstream.PubAckFuture
	msg  *nats.Msg
	sent time.Time
}

// NewPublisher returns a publisher with at most maxInflight unacknowledged
// messages (256 if <= 0).
func (b *Bus) NewPublisher(maxInflight int) *Publisher {
	if maxInflight <= 0 {
		maxInflight = 256
	}
	return &Publisher{bus: b, max: maxInflight, ackWait: asyncAckWait}
}

// FitsInline reports whether a record payload of n bytes can travel as one
// message.
func (p *Publisher) FitsInline(n int) bool { return int64(n)+headroom <= p.bus.MaxPayload() }

// Publish sends one envelope, waiting for older acknowledgements while
// MaxInflight are outstanding. A record too large for one message (a
// revision or meta over the server's max payload) goes to the object
// store and travels as a RecordRefRecord, under the same subject and
// message id.
func (p *Publisher) Publish(ctx context.Context, env *events.Envelope) error {
	if !p.FitsInline(len(env.Payload)) {
		var err error
		if env, err = p.byReference(ctx, env); err != nil {
			return err
		}
	}
	msg := nats.NewMsg(env.Subject)
	for k, v := range env.Headers {
		msg.Header.Set(k, v)
	}
	msg.Data = env.Payload
	f, err := p.bus.JS.PublishMsgAsync(msg)
	if err != nil {
		// Could not even enqueue (e.g. disconnected): fall back to a
		// synchronous publish with retries.
		if err := p.publishSync(ctx, msg); err != nil {
			return err
		}
	} else {
		p.pending = append(p.pending, inflight{f: f, msg: msg, sent: time.Now()})
	}
	for len(p.pending) >= p.max {
		if err := p.reapOldest(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Flush waits until every published message is acknowledged.
func (p *Publisher) Flush(ctx context.Context) error {
	for len(p.pending) > 0 {
		if err := p.reapOldest(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p *Publisher) reapOldest(ctx context.Context) error {
	in := p.pending[0]
	p.pending = p.pending[1:]
	// An acknowledgement that already came is taken before the ack wait
	// is looked at: a batch reaped only after its wait ran out (a tail
	// idle for longer, then flushed) was otherwise published again half
	// the time, select choosing at random among the ready cases.
	select {
	case ack := <-in.f.Ok():
		p.count(ack, in.msg)
		return nil
	default:
	}
	// Counted from the publish, so that the acks lost together with one
	// stream leader all run out together, not one after the other.
	timeout := time.NewTimer(time.Until(in.sent.Add(p.ackWait)))
	defer timeout.Stop()
	select {
	case ack := <-in.f.Ok():
		p.count(ack, in.msg)
		return nil
	case err := <-in.f.Err():
		p.bus.log.Warn("async publish failed; retrying", "subject", in.msg.Subject, "msg_id", in.msg.Header.Get(events.HeaderMsgID), "err", err)
		return p.publishSync(ctx, in.msg)
	case <-timeout.C:
		// The stream leader that took it may have died before it acked
		// (the connection itself stayed up, so nats.go fails nothing):
		// publish it again; its message id makes that safe.
		p.bus.log.Warn("no acknowledgement of an async publish; publishing it again", "subject", in.msg.Subject,
			"msg_id", in.msg.Header.Get(events.HeaderMsgID), "waited", p.ackWait.String())
		return p.publishSync(ctx, in.msg)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Publisher) count(ack *jetstream.PubAck, msg *nats.Msg) {
	p.Stats.Published++
	p.Stats.Bytes += int64(len(msg.Data))
	if ack.Duplicate {
		p.Stats.Duplicates++
	}
}

// asyncAckWait is how long an async publish may go without an
// acknowledgement (from when it was sent) before it is published again
// synchronously.
const asyncAckWait = 10 * time.Second

// publishSync publishes msg and waits for its acknowledgement, riding
// through an unavailable cluster (Bus.Retry); the message id makes a
// publish repeated after a lost acknowledgement a duplicate JetStream
// drops.
func (p *Publisher) publishSync(ctx context.Context, msg *nats.Msg) error {
	what := fmt.Sprintf("publish %s (id %s)", msg.Subject, msg.Header.Get(events.HeaderMsgID))
	ack, err := Call(ctx, p.bus, what, func(ctx context.Context) (*jetstream.PubAck, error) {
		return p.bus.JS.PublishMsg(ctx, msg)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	p.count(ack, msg)
	return nil
}

// byReference puts env's payload in the object store under its content
// address and returns the envelope that refers to it instead.
func (p *Publisher) byReference(ctx context.Context, env *events.Envelope) (*events.Envelope, error) {
	tag := env.Headers[events.HeaderTag]
	if tag == events.TagBlob || tag == events.TagBlobRef || tag == events.TagRecordRef {
		// Blobs are streamed into the object store by their publishers
		// (BlobRefRecord); one arriving here whole is a caller's mistake.
		return nil, fmt.Errorf("publish %s: a %s of %d bytes does not fit in one message", env.Subject, tag, len(env.Payload))
	}
	name := events.RecordObjectName(env.Payload)
	if err := p.PutBlob(ctx, name, env.Payload); err != nil {
		return nil, fmt.Errorf("publish %s: %w", env.Subject, err)
	}
	ref := &events.RecordRefRecord{RecordTag: tag, Object: name, Size: int64(len(env.Payload)), Bucket: p.bus.BlobBucket()}
	payload, err := ref.Encode(events.Msgpack)
	if err != nil {
		return nil, err
	}
	out := *env
	out.Payload = payload
	return &out, nil
}

// PutBlob stores a blob too large for one message in the object store
// under its file_id, unless an object of that name and size is there
// already (blobs are content-addressed, so that is the same blob).
func (p *Publisher) PutBlob(ctx context.Context, fileID string, data []byte) error {
	obj, err := p.bus.Blobs(ctx)
	if err != nil {
		return err
	}
	if info, err := obj.GetInfo(ctx, fileID); err == nil && info.Size == uint64(len(data)) && !info.Deleted {
		p.Stats.BlobsKept++
		return nil
	}
	bo := backoff.WithContext(backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(2*time.Minute)), ctx)
	err = backoff.Retry(func() error {
		_, err := obj.Put(ctx, jetstream.ObjectMeta{Name: fileID}, bytes.NewReader(data))
		return err
	}, bo)
	if err != nil {
		return fmt.Errorf("put blob %s in %s: %w", fileID, p.bus.BlobBucket(), err)
	}
	p.Stats.BlobsPut++
	return nil
}

// PutBlobStream stores a blob read from r (size bytes) in the object
// store under its file_id, without holding it in memory (the object store
// chunks it), unless an object of that name and size is there already. It
// cannot be retried from the middle: the caller retries with a new reader.
func (p *Publisher) PutBlobStream(ctx context.Context, fileID string, size int64, r io.Reader) error {
	obj, err := p.bus.Blobs(ctx)
	if err != nil {
		return err
	}
	if info, err := obj.GetInfo(ctx, fileID); err == nil && info.Size == uint64(size) && !info.Deleted {
		p.Stats.BlobsKept++
		return nil
	}
	if _, err := obj.Put(ctx, jetstream.ObjectMeta{Name: fileID}, r); err != nil {
		return fmt.Errorf("put blob %s in %s: %w", fileID, p.bus.BlobBucket(), err)
	}
	p.Stats.BlobsPut++
	return nil
}

// Reading a blob from the object store must finish within
// blobReadBase plus its size at blobReadFloor bytes per second: nats.go
// gives a whole object read its default request timeout (5 s) when the
// context has no deadline, so a sink slower than that (a 1 GiB blob going
// to S3) failed every attempt and retried forever.
const (
	blobReadBase  = time.Minute
	blobReadFloor = 1 << 20 // 1 MiB/s
)

// OpenBlob reads a blob from the object store. The read's deadline grows
// with the blob's size (see blobReadFloor) unless ctx has one; Close
// releases it.
func (b *Bus) OpenBlob(ctx context.Context, bucket, fileID string) (io.ReadCloser, error) {
	obj, err := b.JS.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", bucket, err)
	}
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		info, err := obj.GetInfo(ctx, fileID)
		if err != nil {
			return nil, fmt.Errorf("blob %s in %s: %w", fileID, bucket, err)
		}
		ctx, cancel = context.WithTimeout(ctx, blobReadBase+time.Duration(info.Size/blobReadFloor)*time.Second)
	}
	r, err := obj.Get(ctx, fileID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("blob %s in %s: %w", fileID, bucket, err)
	}
	return &blobReader{ReadCloser: r, cancel: cancel}, nil
}

// blobReader releases a blob read's deadline when closed.
type blobReader struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (r *blobReader) Close() error {
	err := r.ReadCloser.Close()
	r.cancel()
	return err
}
