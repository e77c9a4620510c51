package replicate

// Point-in-time restore: the stream holds every write in order with the
// time JetStream stored it, and every sink applies events idempotently,
// newer meta winning; so the state of a deployment as of time T is the
// stream's events up to T applied to an empty sink. Restore is a Worker
// on a consumer of its own that stops at the last sequence stored at or
// before T.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/sink"
	"github.com/specstar/replicator/stream"
)

// restoreInactive is how long the server keeps a restore's consumer that
// nobody fetches from (a restore killed before it could delete it).
const restoreInactive = time.Hour

// Restorable is what the stream's retention leaves restorable: from its
// first message's time on, completely only if nothing before it was
// removed. `replicator stream info` shows it; Restore checks against it.
type Restorable struct {
	Stream    string    `json:"stream"`
	Retention string    `json:"retention"`           // limits, interest or workqueue
	Messages  uint64    `json:"messages"`            // events the stream holds
	FirstSeq  uint64    `json:"earliest_sequence"`   // the first event held
	FirstTime time.Time `json:"earliest_time"`       // when it was stored: the earliest restorable time
	LastSeq   uint64    `json:"last_sequence"`       // the last event held
	LastTime  time.Time `json:"last_time"`           // when it was stored
	Dropped   uint64    `json:"dropped"`             // events before FirstSeq the stream no longer holds
	Deleted   int       `json:"deleted"`             // events removed from between FirstSeq and LastSeq
	MaxAge    string    `json:"max_age,omitempty"`   // the stream's max-age, "" when unlimited
	MaxBytes  int64     `json:"max_bytes,omitempty"` // the stream's max-bytes, 0 when unlimited
}

// Complete reports whether the stream still holds every event ever
// stored on it, so a restore at any time from FirstTime on is the whole
// state as of that time.
func (r *Restorable) Complete() bool { return r.Dropped == 0 && r.Deleted == 0 }

// Why names, for messages, what can have removed the dropped events.
func (r *Restorable) why() string {
	var limits []string
	if r.MaxAge != "" {
		limits = append(limits, "max-age "+r.MaxAge)
	}
	if r.MaxBytes > 0 {
		limits = append(limits, fmt.Sprintf("max-bytes %d", r.MaxBytes))
	}
	if r.Retention != "limits" {
		limits = append(limits, r.Retention+" retention")
	}
	if len(limits) == 0 {
		return "a purge of the stream"
	}
	return "retention (" + strings.Join(limits, ", ") + ") or a purge of the stream"
}

// Summary is one line for people: the earliest restorable time and what
// was dropped.
func (r *Restorable) Summary() string {
	if r.Messages == 0 {
		if r.Dropped > 0 {
			return fmt.Sprintf("nothing: the stream holds no events (sequences 1..%d were removed by %s)", r.Dropped, r.why())
		}
		return "nothing: the stream holds no events yet"
	}
	s := fmt.Sprintf("%s (sequence %d)", r.FirstTime.UTC().Format(time.RFC3339Nano), r.FirstSeq)
	switch {
	case r.Dropped > 0:
		s += fmt.Sprintf("; sequences 1..%d were removed by %s, so a restore lacks what only they held", r.Dropped, r.why())
	default:
		s += "; nothing was dropped"
	}
	if r.Deleted > 0 {
		s += fmt.Sprintf("; %d events were deleted from between", r.Deleted)
	}
	return s
}

// RestorableOf reads what the stream of info leaves restorable.
func RestorableOf(info *jetstream.StreamInfo) *Restorable {
	st, c := info.State, info.Config
	r := &Restorable{
		Stream: c.Name, Retention: retentionName(c.Retention), Messages: st.Msgs,
		FirstSeq: st.FirstSeq, LastSeq: st.LastSeq, Deleted: st.NumDeleted,
	}
	if st.FirstSeq > 1 {
		r.Dropped = st.FirstSeq - 1
	}
	if st.Msgs > 0 {
		r.FirstTime, r.LastTime = st.FirstTime, st.LastTime
	}
	if c.MaxAge > 0 {
		r.MaxAge = c.MaxAge.String()
	}
	if c.MaxBytes > 0 {
		r.MaxBytes = c.MaxBytes
	}
	return r
}

func retentionName(p jetstream.RetentionPolicy) string {
	switch p {
	case jetstream.InterestPolicy:
		return "interest"
	case jetstream.WorkQueuePolicy:
		return "workqueue"
	}
	return "limits"
}

// TooEarlyError is a restore asked for a time (or sequence) before the
// first event the stream still holds: nothing can restore it. It names
// the earliest restorable time.
type TooEarlyError struct {
	At       string // the time or sequence asked for
	Earliest *Restorable
}

func (e *TooEarlyError) Error() string {
	r := e.Earliest
	if r.Retention == "workqueue" {
		return fmt.Sprintf("restore as of %s: stream %s has workqueue retention: it removes each event once a sink acknowledges it, so it holds no history to restore from (and a restore's consumer would take events from the sinks')", e.At, r.Stream)
	}
	if r.Messages == 0 {
		return fmt.Sprintf("restore as of %s: stream %s can restore %s", e.At, r.Stream, r.Summary())
	}
	first := r.FirstTime.UTC().Format(time.RFC3339Nano)
	if r.Dropped == 0 {
		return fmt.Sprintf("restore as of %s: stream %s began with its first event at %s (sequence %d), the earliest restorable time: there is nothing before it to restore",
			e.At, r.Stream, first, r.FirstSeq)
	}
	return fmt.Sprintf("restore as of %s: stream %s holds events from %s (sequence %d) on, the earliest restorable time (%s dropped what came before; size --max-age and --max-bytes for the restore window you need)",
		e.At, r.Stream, first, r.FirstSeq, r.why())
}

// Permanent says no retry changes it (the command's exit status 1).
func (e *TooEarlyError) Permanent() bool { return true }

// IncompleteError is a restore refused because retention removed events
// from the stream's start: restoring what is left would lack every
// resource whose writes were all in them. AcceptGap restores it anyway.
type IncompleteError struct{ Restorable *Restorable }

func (e *IncompleteError) Error() string {
	r := e.Restorable
	return fmt.Sprintf("stream %s no longer holds sequences 1..%d (%s removed them): a restore from sequence %d (%s) on lacks every resource written only before it; restore anyway with --accept-gap, or publish a full snapshot of the source (writer snapshot, writer replay) and restore to a time after it",
		r.Stream, r.Dropped, r.why(), r.FirstSeq, r.FirstTime.UTC().Format(time.RFC3339Nano))
}

// Permanent says no retry changes it (the command's exit status 1).
func (e *IncompleteError) Permanent() bool { return true }

// NotEmptyError is a restore refused because the sink already holds
// metas: applying the past onto them would mix two states (newer metas
// win). Force restores into it anyway.
type NotEmptyError struct{ Sink string }

func (e *NotEmptyError) Error() string {
	return fmt.Sprintf("sink %s is not empty (it holds metas): restore into an empty sink, or give --force to resume a restore into it at the same point or move it to a later one (newer metas win: a later state it holds stays, and the restore then fails saying so)", e.Sink)
}

// RestoreOptions say what to restore and where.
type RestoreOptions struct {
	Config
	// At is the time to restore as of: every event the stream stored at
	// or before it. Ignored when AtSeq is set.
	At time.Time
	// AtSeq, when not 0, is the last stream sequence to restore instead.
	AtSeq uint64
	// AcceptGap restores even when retention removed events from the
	// stream's start (IncompleteError otherwise) or events were deleted
	// from before the point (HoleError otherwise).
	AcceptGap bool
	// Force restores into a sink that is not empty (NotEmptyError
	// otherwise): to resume a restore at the same point or move it to a
	// later one. Newer metas win, so a later state the sink holds stays:
	// Restore then fails with a LaterStateError once everything is
	// applied.
	Force   bool
	Name    string       // the sink's consumer name; the restore's own is derived from it
	Display string       // how people see the sink, in messages and logs
	Models  []string     // only these models' events (nil: every event)
	Logger  *slog.Logger // nil: discard
}

// Point is where a restore stops: the last stream sequence applied and
// the time the stream stored it.
type Point struct {
	Seq  uint64    `json:"sequence"`
	Time time.Time `json:"time"`
}

// RestoreResult is what a restore did.
type RestoreResult struct {
	Point    Point  `json:"stopped_at"`
	FirstSeq uint64 `json:"first_sequence"` // the first sequence read
	Consumer string `json:"consumer"`       // the restore's own consumer (dead letters are filed under it)
	Stats
}

// Restore applies to snk every event the stream stored up to the point
// opts name, with the engine `replicator run` uses, on a consumer of its
// own that it deletes afterwards (so it never disturbs the sinks' durable
// consumers), and returns where it stopped. It refuses, before writing
// anything, a time before the earliest the stream holds (TooEarlyError),
// a stream whose retention removed its first events (IncompleteError,
// unless AcceptGap) or events between them and the point (HoleError,
// unless AcceptGap) and a sink that holds metas (NotEmptyError, unless
// Force); with Force into a sink that held something, it fails
// afterwards with a LaterStateError when the sink still holds what no
// event up to the point wrote. The caller keeps ownership of bus and snk.
func Restore(ctx context.Context, bus *stream.Bus, snk sink.Sink, opts RestoreOptions) (*RestoreResult, error) {
	if opts.Display == "" {
		opts.Display = opts.Name
	}
	name := bus.Config().Stream
	info, err := stream.Call(ctx, bus, "stream "+name+" info", func(ctx context.Context) (*jetstream.StreamInfo, error) {
		return bus.Stream.Info(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", name, err)
	}
	r := RestorableOf(info)
	if r.Retention == "workqueue" {
		// A second consumer would take events from the sinks' own.
		return nil, &TooEarlyError{At: describeAt(opts), Earliest: r}
	}
	point, err := PointOf(ctx, bus, r, opts.At, opts.AtSeq)
	if err != nil {
		return nil, err
	}
	if r.Dropped > 0 {
		if !opts.AcceptGap {
			return nil, &IncompleteError{Restorable: r}
		}
		if opts.Logger != nil {
			opts.Logger.Warn((&IncompleteError{Restorable: r}).Error() + "; going on because of --accept-gap")
		}
	}
	holes, err := HolesUpTo(ctx, bus, info, askedUpTo(ctx, bus, r, point, opts.AtSeq))
	if err != nil {
		return nil, err
	}
	if holes != nil {
		if !opts.AcceptGap {
			return nil, &HoleError{Holes: holes}
		}
		if opts.Logger != nil {
			opts.Logger.Warn((&HoleError{Holes: holes}).Error() + "; going on because of --accept-gap")
		}
	}
	// A run writing into the sink while it is restored would leave a later
	// state where the restore claims its point: a sink several writers may
	// share is held for the restore alone (a disk sink always is).
	var unheld error = errors.ErrUnsupported
	if ex, ok := snk.(sink.Exclusive); ok {
		unheld = ex.Exclusive(ctx)
		if unheld != nil && !errors.Is(unheld, errors.ErrUnsupported) {
			return nil, fmt.Errorf("restore into %s: %w", opts.Display, unheld)
		}
	}
	if unheld != nil && opts.Logger != nil {
		opts.Logger.Warn("sink cannot be held for the restore alone: a run writing into it meanwhile is not kept out; stop every writer of it first", "sink", opts.Display, "why", unheld)
	}
	empty, err := sink.Empty(ctx, snk, opts.Models)
	switch {
	case err != nil && !opts.Force:
		return nil, fmt.Errorf("sink %s: cannot tell whether it is empty (give --force to restore into it anyway): %w", opts.Display, err)
	case err == nil && !empty && !opts.Force:
		return nil, &NotEmptyError{Sink: opts.Display}
	}
	// Into a sink that holds something (or may), newer metas win: what a
	// later state wrote would stay. Checked once everything is applied.
	track := opts.Force && (err != nil || !empty)
	if err := bus.EnsureDLQ(ctx); err != nil { // a restore can dead-letter events too
		return nil, err
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	res := &RestoreResult{Point: point, FirstSeq: r.FirstSeq, Consumer: "restore-" + opts.Name + "-" + hex.EncodeToString(suffix[:])}
	cfg := opts.Config
	cfg.UntilDrained, cfg.AcceptGap = true, true
	w, err := NewWorker(bus, snk, Options{Config: cfg, Name: res.Consumer, Display: opts.Display, Models: opts.Models, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	w.stopAt = point.Seq
	if track {
		w.asOf = newAsOfTracker()
	}
	runErr := w.Run(ctx)
	res.Stats = w.Stats()
	// Deleted even when ctx ended: a consumer left behind would hold
	// events on an interest stream until the server drops it.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := bus.Stream.DeleteConsumer(dctx, res.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		w.log.Warn("could not delete the restore's consumer; the server removes it once idle", "consumer", res.Consumer, "err", err, "after", restoreInactive)
	}
	if runErr != nil {
		return res, fmt.Errorf("restore into %s up to sequence %d: %w", opts.Display, point.Seq, runErr)
	}
	if track {
		checked, err := w.asOf.check(ctx, snk, opts.Models, opts.Display, point)
		if err != nil {
			return res, err
		}
		if !checked {
			w.log.Warn("sink cannot be listed and read back: whether it still holds a state later than the restore point (newer metas win) is not checked", "sink", opts.Display)
		}
	}
	return res, nil
}

// askedUpTo is the last sequence a restore to point was asked to cover:
// atSeq when given (the point is the last event held up to it), else
// every sequence before the next event held after the point, since a
// deleted event keeps no time to say whether it came before the time
// asked.
func askedUpTo(ctx context.Context, bus *stream.Bus, r *Restorable, point Point, atSeq uint64) uint64 {
	if atSeq > 0 {
		return atSeq
	}
	if point.Seq >= r.LastSeq {
		return r.LastSeq
	}
	if m, err := msgFrom(ctx, bus, point.Seq+1); err == nil {
		return m.Sequence - 1
	}
	return r.LastSeq
}

func describeAt(opts RestoreOptions) string {
	if opts.AtSeq > 0 {
		return fmt.Sprintf("sequence %d", opts.AtSeq)
	}
	return opts.At.UTC().Format(time.RFC3339Nano)
}

// PointOf is the last event of the stream of r stored at or before at
// (by the stream's own timestamps), or the event at sequence atSeq when
// that is not 0 (or the last held before it, when it was deleted). A
// point before r's first event is a TooEarlyError, a sequence after its
// last a BeyondEndError; a time after the last event is the last event.
func PointOf(ctx context.Context, bus *stream.Bus, r *Restorable, at time.Time, atSeq uint64) (Point, error) {
	asked := RestoreOptions{At: at, AtSeq: atSeq}
	if r.Messages == 0 || r.Retention == "workqueue" {
		return Point{}, &TooEarlyError{At: describeAt(asked), Earliest: r}
	}
	if atSeq > 0 {
		switch {
		case atSeq < r.FirstSeq:
			return Point{}, &TooEarlyError{At: describeAt(asked), Earliest: r}
		case atSeq > r.LastSeq:
			return Point{}, &BeyondEndError{AtSeq: atSeq, Restorable: r}
		}
		// The state as of a deleted sequence is the state as of the last
		// event held before it: found by sequence, not by time (a deleted
		// last event leaves nothing after it to take a time from).
		return lastHeldUpTo(ctx, bus, r.FirstSeq, atSeq)
	}
	switch {
	case at.Before(r.FirstTime):
		return Point{}, &TooEarlyError{At: describeAt(asked), Earliest: r}
	case !at.Before(r.LastTime):
		return Point{Seq: r.LastSeq, Time: r.LastTime}, nil
	}
	// The largest lo whose first event at or after it was stored at or
	// before at; hi's never is (the stream's timestamps only grow).
	lo, hi := r.FirstSeq, r.LastSeq
	var found Point
	if m, err := msgFrom(ctx, bus, lo); err != nil {
		return Point{}, err
	} else {
		found = Point{Seq: m.Sequence, Time: m.Time}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		m, err := msgFrom(ctx, bus, mid)
		if err != nil {
			return Point{}, err
		}
		if m.Time.After(at) {
			hi = mid
			continue
		}
		lo, found = m.Sequence, Point{Seq: m.Sequence, Time: m.Time}
		if lo >= hi {
			break
		}
	}
	return found, nil
}

// lastHeldUpTo is the last event the stream holds at or before seq,
// first being one it holds: a binary search over sequences, so deleted
// events (any number, the last one included) cost no time order.
func lastHeldUpTo(ctx context.Context, bus *stream.Bus, first, seq uint64) (Point, error) {
	m, err := msgFrom(ctx, bus, first)
	if err != nil {
		return Point{}, err
	}
	found := Point{Seq: m.Sequence, Time: m.Time}
	lo, hi := found.Seq, seq // lo is held; nothing held lies in (hi, seq]
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		m, err := msgFrom(ctx, bus, mid)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			hi = mid - 1 // nothing held from mid on
		case err != nil:
			return Point{}, err
		case m.Sequence > hi:
			hi = mid - 1 // nothing held in [mid, hi]
		default:
			lo, found = m.Sequence, Point{Seq: m.Sequence, Time: m.Time}
		}
	}
	return found, nil
}

// BeyondEndError is a restore asked for a sequence after the last the
// stream has stored: there is no state as of it (yet). It names the end.
type BeyondEndError struct {
	AtSeq      uint64
	Restorable *Restorable
}

func (e *BeyondEndError) Error() string {
	r := e.Restorable
	return fmt.Sprintf("restore as of sequence %d: stream %s ends at sequence %d (stored %s): give a sequence at most that, or --at a time",
		e.AtSeq, r.Stream, r.LastSeq, r.LastTime.UTC().Format(time.RFC3339Nano))
}

// Permanent says the input is wrong, not the stream (exit status 1), as
// for a sequence before the stream's first event.
func (e *BeyondEndError) Permanent() bool { return true }

// msgFrom is the first event the stream holds at or after seq.
func msgFrom(ctx context.Context, bus *stream.Bus, seq uint64) (*jetstream.RawStreamMsg, error) {
	name := bus.Config().Stream
	m, err := stream.Call(ctx, bus, fmt.Sprintf("stream %s get message %d", name, seq), func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return bus.Stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(bus.Prefix()+".>"))
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: the event at sequence %d: %w", name, seq, err)
	}
	return m, nil
}

// ParseTime reads a restore's --at: an RFC 3339 time (fractional seconds
// allowed), or a positive duration such as 2h or 90m meaning that long
// before now.
func ParseTime(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--at %q: want an RFC 3339 time (2026-12-02T15:04:05Z) or a duration ago (2h, 90m)", v)
	}
	return now.Add(-d), nil
}
