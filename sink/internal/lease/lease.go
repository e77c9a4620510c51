// Package lease holds a store that has no locks of its own (S3, Redis)
// for a restore alone, as an advisory lock holds Postgres tables and a
// flock a disk tree: every writer keeps a short lease of its own there,
// renewed while it is open, and a restore keeps the one restore lease.
// Each side writes its own lease before it reads the other's, so of a
// writer and a restore starting together at least one sees the other
// and stands back (the store must read its own writes, as S3 and Redis
// do). A killed holder's lease expires after TTL, so it never blocks the
// next one for longer.
//
// What a lease cannot do is fence a request already in flight: a writer
// paused for longer than TTL in the middle of a request (SIGSTOP, a VM
// migration) may finish it after a restore has taken over. Every later
// write checks the lease first and is refused.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultTTL is how long a lease outlives its holder's last renewal;
// holders renew every TTL/3.
const DefaultTTL = 30 * time.Second

// Names of the leases in a Store.
const (
	restoreName   = "restore"
	writersPrefix = "writers/"
)

// Store is where leases live: one small object or key per name. It is
// declared here, where it is consumed; each backend implements it over
// its own conditional writes.
type Store interface {
	// Create writes body under name only if nothing is there; created
	// false means something was.
	Create(ctx context.Context, name string, body []byte, ttl time.Duration) (created bool, err error)
	// Replace writes body under name only if it still holds the version
	// Get returned; ok false means it changed meanwhile.
	Replace(ctx context.Context, name string, body []byte, version string, ttl time.Duration) (ok bool, err error)
	// Put writes body under name whatever is there.
	Put(ctx context.Context, name string, body []byte, ttl time.Duration) error
	// Get reads name; found false means nothing is there.
	Get(ctx context.Context, name string) (body []byte, version string, found bool, err error)
	// List names every lease whose name starts with prefix.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes name; a missing name is no error.
	Delete(ctx context.Context, name string) error
}

// Holder is what a lease says about the process that holds it.
type Holder struct {
	ID      string    `json:"id"`
	Role    string    `json:"role"` // "writer" or "restore"
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires"`
}

func (h Holder) String() string {
	return fmt.Sprintf("%s on %s pid %d since %s, lease until %s", h.Role, h.Host, h.PID,
		h.Since.UTC().Format(time.RFC3339), h.Expires.UTC().Format(time.RFC3339))
}

// HeldError is the refusal of a store another process holds in a
// conflicting role: a restore while a writer writes it, or a write while
// a restore holds it.
type HeldError struct {
	Store  string // the store, for messages
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is held by another process (%s): a restore holds it alone, and no restore starts while a writer writes it; stop the other one, or restore elsewhere", e.Store, e.Holder)
}

// Held says a retry does not help while the holder holds the store: a
// worker stops rather than retries (see sink.IsHeld).
func (e *HeldError) Held() bool { return true }

// LostError says this process's lease expired before it was renewed (it
// was paused, or the store did not answer for longer than the TTL), and
// a restore may have taken over; nothing more is written until it is
// taken again.
type LostError struct {
	Store string
	Since time.Time // last renewal
}

func (e *LostError) Error() string {
	return fmt.Sprintf("%s: this process's lease was last renewed at %s, longer ago than it lasts; it is taken again before anything more is written", e.Store, e.Since.UTC().Format(time.RFC3339))
}

// Held says a retry does not help: the restore whose lease lapsed stops.
func (e *LostError) Held() bool { return true }

// Keeper takes, renews and releases one process's lease in one Store.
type Keeper struct {
	store  Store
	name   string // the store, for messages
	ttl    time.Duration
	logger *slog.Logger

	mu      sync.Mutex
	self    Holder
	lease   string    // name of the lease held; "" none
	version string    // of the restore lease, for renewals
	renewed time.Time // when the lease held was last written
	stop    chan struct{}
	done    chan struct{}
}

// New returns a Keeper of leases in st, named name in messages; ttl 0
// means DefaultTTL.
func New(st Store, name string, ttl time.Duration, logger *slog.Logger) *Keeper {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if logger == nil {
		logger = slog.Default()
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	host, _ := os.Hostname()
	return &Keeper{store: st, name: name, ttl: ttl, logger: logger,
		self: Holder{ID: hex.EncodeToString(id[:]), Host: host, PID: os.Getpid()}}
}

// body is the lease's content as of now.
func (k *Keeper) body(now time.Time) []byte {
	h := k.self
	h.Expires = now.Add(k.ttl)
	b, _ := json.Marshal(h)
	return b
}

// read reads a lease; found false when there is none or it expired.
func (k *Keeper) read(ctx context.Context, name string) (h Holder, version string, found bool, err error) {
	b, version, found, err := k.store.Get(ctx, name)
	if err != nil || !found {
		return Holder{}, "", false, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		// Not ours to judge: a lease nobody can read holds nothing.
		k.logger.Warn("lease cannot be read; taken as expired", "store", k.name, "lease", name, "error", err)
		return Holder{}, version, false, nil
	}
	return h, version, time.Now().Before(h.Expires), nil
}

// Writing is called before every write: the first takes a writer lease
// (refused with a *HeldError while a restore holds the store), and a
// lease not renewed in time is taken again. A restore's own writes pass
// while its lease holds.
func (k *Keeper) Writing(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lease != "" {
		if time.Since(k.renewed) < k.ttl {
			return nil
		}
		if k.self.Role == "restore" {
			return &LostError{Store: k.name, Since: k.renewed}
		}
	}
	return k.takeWriter(ctx)
}

// takeWriter writes the writer lease, then looks for a restore's: one
// found refuses the writer at once (see noOtherWriter for why).
func (k *Keeper) takeWriter(ctx context.Context) error {
	name := writersPrefix + k.self.ID
	if k.lease == "" {
		k.self.Role, k.self.Since = "writer", time.Now()
	}
	now := time.Now()
	if err := k.store.Put(ctx, name, k.body(now), k.ttl); err != nil {
		return fmt.Errorf("%s: writer lease: %w", k.name, err)
	}
	h, _, found, err := k.read(ctx, restoreName)
	if err == nil && found && h.ID != k.self.ID {
		err = &HeldError{Store: k.name, Holder: h}
	}
	if err != nil {
		k.release(ctx, name)
		k.lease = ""
		return fmt.Errorf("%s: writer lease: %w", k.name, err)
	}
	k.lease, k.renewed = name, now
	k.startRenewing()
	return nil
}

// Exclusive holds the store for this process alone (a restore): it
// fails with a *HeldError while another writer's or restore's lease
// holds it, and from then on every other writer is refused until Close.
func (k *Keeper) Exclusive(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.self.Role == "restore" && time.Since(k.renewed) < k.ttl {
		return nil
	}
	prev, prevRole := k.lease, k.self.Role
	k.self.Role, k.self.Since = "restore", time.Now()
	now := time.Now()
	body := k.body(now)
	created, err := k.store.Create(ctx, restoreName, body, k.ttl)
	if err != nil {
		k.self.Role = prevRole
		return fmt.Errorf("%s: restore lease: %w", k.name, err)
	}
	if !created {
		h, version, found, err := k.read(ctx, restoreName)
		switch {
		case err != nil:
			k.self.Role = prevRole
			return fmt.Errorf("%s: restore lease: %w", k.name, err)
		case found && h.ID != k.self.ID:
			k.self.Role = prevRole
			return &HeldError{Store: k.name, Holder: h}
		}
		// Expired (or ours): replaced only if no one replaced it first.
		ok, err := k.store.Replace(ctx, restoreName, body, version, k.ttl)
		if err != nil || !ok {
			k.self.Role = prevRole
			if err == nil {
				err = errors.New("another restore took it first")
			}
			return fmt.Errorf("%s: restore lease: %w", k.name, err)
		}
	}
	_, version, _, err := k.store.Get(ctx, restoreName)
	if err == nil {
		err = k.noOtherWriter(ctx)
	}
	if err != nil {
		k.self.Role = prevRole
		k.release(ctx, restoreName)
		return err
	}
	if prev != "" && prev != restoreName {
		k.release(ctx, prev)
	}
	k.lease, k.version, k.renewed = restoreName, version, now
	k.startRenewing()
	return nil
}

// noOtherWriter fails with a *HeldError naming a live writer lease other
// than this process's. A writer lease found may be one whose writer is
// just now finding the restore's lease and standing back (a writer
// refused removes its lease at once, and never takes it again by itself):
// it is watched for Settle, and only one still there holds the store. So
// of a writer and a restore starting together exactly one goes on.
func (k *Keeper) noOtherWriter(ctx context.Context) error {
	names, err := k.store.List(ctx, writersPrefix)
	if err != nil {
		return fmt.Errorf("%s: writer leases: %w", k.name, err)
	}
	deadline := time.Now().Add(k.settle())
	for _, n := range names {
		if n == writersPrefix+k.self.ID {
			continue
		}
		for {
			h, _, found, err := k.read(ctx, n)
			if err != nil {
				return fmt.Errorf("%s: writer lease %s: %w", k.name, n, err)
			}
			if !found {
				_ = k.store.Delete(ctx, n) // gone, or an expired writer's: swept
				break
			}
			if !time.Now().Before(deadline) {
				return &HeldError{Store: k.name, Holder: h}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(k.settle() / 20):
			}
		}
	}
	return nil
}

// settle is how long a restore watches a writer lease it found: far
// longer than a writer takes between writing its lease and reading the
// restore's.
func (k *Keeper) settle() time.Duration { return min(k.ttl/15, 2*time.Second) }

// startRenewing starts the renewals of the lease held, once.
func (k *Keeper) startRenewing() {
	if k.stop != nil {
		return
	}
	k.stop, k.done = make(chan struct{}), make(chan struct{})
	go k.renewLoop(k.stop, k.done)
}

func (k *Keeper) renewLoop(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(k.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), k.ttl/3)
		if err := k.renew(ctx); err != nil {
			k.logger.Warn("lease not renewed", "store", k.name, "error", err)
		}
		cancel()
	}
}

// renew writes the lease held again, if it is still held in time; one
// that lapsed is taken again by the next Writing (a writer's) or is lost
// (a restore's).
func (k *Keeper) renew(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lease == "" || time.Since(k.renewed) >= k.ttl {
		return nil
	}
	now := time.Now()
	if k.lease == restoreName {
		ok, err := k.store.Replace(ctx, restoreName, k.body(now), k.version, k.ttl)
		if err != nil {
			return err
		}
		if !ok {
			k.renewed = time.Time{}
			return fmt.Errorf("restore lease was replaced by another process")
		}
		_, k.version, _, err = k.store.Get(ctx, restoreName)
		if err != nil {
			return err
		}
		k.renewed = now
		return nil
	}
	if err := k.store.Put(ctx, k.lease, k.body(now), k.ttl); err != nil {
		return err
	}
	k.renewed = now
	return nil
}

// release deletes a lease, for Close and for refusals.
func (k *Keeper) release(ctx context.Context, name string) {
	if err := k.store.Delete(context.WithoutCancel(ctx), name); err != nil {
		k.logger.Warn("lease not released; it expires by itself", "store", k.name, "lease", name, "error", err)
	}
}

// Close stops the renewals and releases the lease held.
func (k *Keeper) Close(ctx context.Context) {
	k.mu.Lock()
	stop, done := k.stop, k.done
	k.stop, k.done = nil, nil
	k.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lease != "" {
		k.release(ctx, k.lease)
		k.lease, k.self.Role = "", ""
	}
}
