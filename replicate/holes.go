package replicate

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/specstar/replicator/stream"
)

// Holes are the events deleted from between a stream's first and last
// sequence (by `nats stream rmm`, a purge filtered to some subjects,
// interest retention), up to some sequence: a sink or a restore that went
// past them lacks what only they held.
type Holes struct {
	Stream string
	UpTo   uint64      // the last sequence considered
	Count  uint64      // deleted events in FirstSeq..UpTo
	Ranges [][2]uint64 // the first few of them, as first..last ranges; nil when the server gave no details
}

// maxHoleRanges is how many ranges Holes keeps to name.
const maxHoleRanges = 5

// String names the holes for people: "3 events (2, 7..8)".
func (h *Holes) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events", h.Count)
	if len(h.Ranges) > 0 {
		var parts []string
		for _, r := range h.Ranges {
			if r[0] == r[1] {
				parts = append(parts, fmt.Sprint(r[0]))
			} else {
				parts = append(parts, fmt.Sprintf("%d..%d", r[0], r[1]))
			}
		}
		named := uint64(0)
		for _, r := range h.Ranges {
			named += r[1] - r[0] + 1
		}
		if named < h.Count {
			parts = append(parts, "...")
		}
		fmt.Fprintf(&b, " (sequences %s)", strings.Join(parts, ", "))
	}
	return b.String()
}

// HolesUpTo reads the events deleted from the stream of bus from its first
// sequence up to upTo; nil when there are none. info is the stream's
// info, already read, whose count of deleted events decides whether the
// details are asked for at all.
func HolesUpTo(ctx context.Context, bus *stream.Bus, info *jetstream.StreamInfo, upTo uint64) (*Holes, error) {
	if info.State.NumDeleted == 0 {
		return nil, nil
	}
	name := bus.Config().Stream
	h := &Holes{Stream: name, UpTo: upTo}
	detail, err := stream.Call(ctx, bus, "stream "+name+" info", func(ctx context.Context) (*jetstream.StreamInfo, error) {
		return bus.Stream.Info(ctx, jetstream.WithDeletedDetails(true))
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: the deleted events: %w", name, err)
	}
	if len(detail.State.Deleted) == 0 {
		// No details (a server that leaves them out): every deleted event
		// counts, wherever it is.
		h.Count = uint64(detail.State.NumDeleted)
		return h, nil
	}
	for _, seq := range detail.State.Deleted {
		if seq > upTo || seq < detail.State.FirstSeq {
			continue
		}
		h.Count++
		if n := len(h.Ranges); n > 0 && h.Ranges[n-1][1]+1 == seq {
			h.Ranges[n-1][1] = seq
		} else if n < maxHoleRanges {
			h.Ranges = append(h.Ranges, [2]uint64{seq, seq})
		}
	}
	if h.Count == 0 {
		return nil, nil
	}
	return h, nil
}

// StreamHoles are the holes of the whole stream of info (up to its last
// sequence) where they mean lost events: on limits retention, where only
// a person or a filtered purge deletes them (interest and workqueue
// streams delete acknowledged events by design); nil otherwise or when
// there are none.
func StreamHoles(ctx context.Context, bus *stream.Bus, info *jetstream.StreamInfo) (*Holes, error) {
	if info.Config.Retention != jetstream.LimitsPolicy {
		return nil, nil
	}
	return HolesUpTo(ctx, bus, info, info.State.LastSeq)
}

// HoleError is a restore refused because events were deleted from between
// the stream's first event and the restore point: restoring the rest
// would lack what only they held. AcceptGap restores it anyway.
type HoleError struct{ Holes *Holes }

func (e *HoleError) Error() string {
	h := e.Holes
	return fmt.Sprintf("stream %s lacks %s deleted from between its first event and sequence %d: a restore to it lacks what only they held; restore anyway with --accept-gap, or to a point before them",
		h.Stream, h, h.UpTo)
}

// Permanent says no retry changes it (the command's exit status 1).
func (e *HoleError) Permanent() bool { return true }
