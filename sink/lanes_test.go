package sink_test

import (
	"reflect"
	"testing"

	"github.com/specstar/replicator/sink"
)

// TestLanes: events of one resource, and revisions sharing a uid across
// resources, share a lane in stream order; the others go apart.
func TestLanes(t *testing.T) {
	type k = sink.LaneKey
	for _, c := range []struct {
		name string
		keys []k
		want [][]int
	}{
		{"empty", nil, nil},
		{"apart", []k{{"a", "u1"}, {"b", "u2"}, {"", ""}}, [][]int{{0}, {1}, {2}}},
		{"one resource", []k{{"a", ""}, {"b", ""}, {"a", "u1"}}, [][]int{{0, 2}, {1}}},
		{"shared uid", []k{{"victim", "u"}, {"x", "v"}, {"evil", "u"}}, [][]int{{0, 2}, {1}}},
		{"own uid again", []k{{"a", "u"}, {"a", "u"}}, [][]int{{0, 1}}},
		// evil's meta comes before the victim's revision: the uid joins
		// evil's lane with the victim's, in stream order.
		{"joined through others", []k{{"evil", ""}, {"victim", "u"}, {"y", ""}, {"evil", "u"}, {"victim", ""}}, [][]int{{0, 1, 3, 4}, {2}}},
		{"chain", []k{{"a", "u"}, {"b", "v"}, {"c", "u"}, {"c", "v"}, {"d", ""}}, [][]int{{0, 1, 2, 3}, {4}}},
		{"no key", []k{{"", ""}, {"", ""}}, [][]int{{0}, {1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sink.Lanes(c.keys); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Lanes(%v) = %v, want %v", c.keys, got, c.want)
			}
		})
	}
}
