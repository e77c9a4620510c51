package sink

// LaneKey is what orders one event of a batch against the others.
//
// Events of one Resource (a model's resource, or a blob) must be applied
// in stream order: a purge must not overtake the meta it deletes. So must
// revisions sharing one UID, whatever their resources: a sink keeps a uid
// for the first resource that stored it and refuses it to the next
// (store.CheckUIDHolder), so the first in stream order must be applied
// first for every replica of a stream to hold the same bytes. UIDs are
// compared across models, as the Postgres sink's resource tables are
// shared by the models of a table prefix.
type LaneKey struct {
	Resource string // "" orders the event by nothing
	UID      string // a revision's uid; "" for any other event
}

// Lanes splits a batch, one key per event in stream order, into lanes
// that may be applied in parallel: each lane lists event indices in
// stream order, and events sharing a Resource or a UID (directly or
// through others) share a lane. Lanes are in the order of their first
// event.
func Lanes(keys []LaneKey) [][]int {
	parent := make([]int, len(keys))
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) {
		ra, rb := find(a), find(b)
		if ra == rb {
			return
		}
		if rb < ra {
			ra, rb = rb, ra
		}
		parent[rb] = ra // the root is a lane's first event
	}
	byResource := map[string]int{}
	byUID := map[string]int{}
	for i, k := range keys {
		parent[i] = i
		if k.Resource != "" {
			if j, ok := byResource[k.Resource]; ok {
				union(j, i)
			} else {
				byResource[k.Resource] = i
			}
		}
		if k.UID != "" {
			if j, ok := byUID[k.UID]; ok {
				union(j, i)
			} else {
				byUID[k.UID] = i
			}
		}
	}
	var lanes [][]int
	lane := map[int]int{} // root -> index in lanes
	for i := range keys {
		r := find(i)
		l, ok := lane[r]
		if !ok {
			l = len(lanes)
			lane[r] = l
			lanes = append(lanes, nil)
		}
		lanes[l] = append(lanes[l], i)
	}
	return lanes
}
