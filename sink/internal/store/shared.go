package store

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"

	"github.com/specstar/replicator/events"
)

// OptString is an optional string field of a record (schema versions),
// named once for the many signatures that take one.
type OptString = events.Opt[string]

// On-duplicate strategies of SpecStar's archive restore (AutoCRUD.load),
// shared by the backends that offer them (disk, postgres).
const (
	// DupNewer lets the newer meta win (the default).
	DupNewer = ""
	// DupOverwrite lets the last meta applied win.
	DupOverwrite = "overwrite"
	// DupSkip leaves an existing meta, and that resource's revisions, alone.
	DupSkip = "skip"
	// DupRaise refuses a meta when one is already stored.
	DupRaise = "raise_error"
)

// ListPage is how many resource ids a listing reads at a time (SQLite and
// Postgres pages, directory chunks).
const ListPage = 1000

// Supersedes reports whether revision info n (encoded nb) is newer than e
// (encoded eb), for one uid or one index slot: the one replay rule every
// resource store applies.
func Supersedes(n *events.RevisionInfo, nb []byte, e *events.RevisionInfo, eb []byte) bool {
	if !SameSchema(n.SchemaVersion, e.SchemaVersion) {
		if e.ParentSchemaVersion.Present && SameSchema(e.ParentSchemaVersion, n.SchemaVersion) {
			return false // e is the migration of n
		}
		if n.ParentSchemaVersion.Present && SameSchema(n.ParentSchemaVersion, e.SchemaVersion) {
			return true // n is the migration of e
		}
	}
	if c := n.UpdatedTime.Instant().Compare(e.UpdatedTime.Instant()); c != 0 {
		return c > 0
	}
	return bytes.Compare(nb, eb) > 0
}

// SameSchema compares schema versions, None and UNSET alike.
func SameSchema(a, b OptString) bool {
	if !a.IsSet() || !b.IsSet() {
		return !a.IsSet() && !b.IsSet()
	}
	return a.Value == b.Value
}

// CtxReader stops a long copy when its context ends.
type CtxReader struct {
	Ctx context.Context
	R   io.Reader
}

// Read fails with the context's error once it has ended.
func (c CtxReader) Read(p []byte) (int, error) {
	if err := c.Ctx.Err(); err != nil {
		return 0, err
	}
	return c.R.Read(p)
}

// KeyLocks serializes work on one key (a resource, a blob) without a
// global lock. The zero value is ready to use.
type KeyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu  sync.Mutex
	ref int
}

// Lock takes the lock of key and returns what releases it.
func (k *KeyLocks) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.ref++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.ref--; l.ref == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// SplitList reads a comma-separated option value (models=a,b), dropping
// empty items.
func SplitList(v string) []string {
	var out []string
	for _, m := range strings.Split(v, ",") {
		if m != "" {
			out = append(out, m)
		}
	}
	return out
}

// CompareMeta orders two metas of one resource: by updated time (naive
// read as UTC), then total revision count, then encoded bytes (a
// deterministic tie-break between different metas that tie on both): the
// newer-meta-wins rule every meta store applies, so the result never
// depends on arrival order.
func CompareMeta(a *events.ResourceMeta, ab []byte, b *events.ResourceMeta, bb []byte) int {
	if c := a.UpdatedTime.Instant().Compare(b.UpdatedTime.Instant()); c != 0 {
		return c
	}
	if a.TotalRevisionCount != b.TotalRevisionCount {
		if a.TotalRevisionCount > b.TotalRevisionCount {
			return 1
		}
		return -1
	}
	return bytes.Compare(ab, bb)
}

// CheckUIDHolder refuses a revision whose uid the store already holds
// (held, nil if none or undecodable) for another resource: a uid names one
// revision of one resource, and the second would overwrite the first's
// content, or be served from the first's index slot. The error names both
// resources, bounded.
func CheckUIDHolder(info, held *events.RevisionInfo) error {
	if held == nil || held.ResourceID == info.ResourceID {
		return nil
	}
	return Invalidf("uid "+events.QuoteBounded(info.UID), "already held by resource_id %s, refused for resource_id %s",
		events.QuoteBounded(held.ResourceID), events.QuoteBounded(info.ResourceID))
}

// RevisionRef names one revision a resource store holds: its index entry.
// Model is "" where the store does not say (Postgres's resource tables are
// shared by all models).
type RevisionRef struct {
	Model, ResourceID, RevisionID string
	SchemaVersion                 OptString
}

// String names the revision for messages: model/resource revision id.
func (r RevisionRef) String() string {
	s := r.ResourceID + " revision " + r.RevisionID
	if r.SchemaVersion.Present && !r.SchemaVersion.Null {
		s += " (schema version " + r.SchemaVersion.Value + ")"
	}
	if r.Model != "" {
		s = r.Model + "/" + s
	}
	return s
}
