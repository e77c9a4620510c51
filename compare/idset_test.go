package compare

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
)

// TestIDSet: the source index answers membership per model across its
// insert batches, counts each resource once, and leaves nothing behind.
func TestIDSet(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	s, err := newIDSet(ctx, tmp)
	if err != nil {
		t.Fatal(err)
	}
	n := 2*idSetBatch + 3
	for i := 0; i < n; i++ {
		for _, model := range []string{"issue", "user"} {
			for range 2 { // a resource's records come together: added twice
				if err := s.Add(ctx, model, fmt.Sprintf("r-%d-ü", i)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := s.Add(ctx, "issue", "r-0-ü"); err != nil { // and again, later
		t.Fatal(err)
	}
	for _, c := range []struct {
		model string
		ask   []string
		want  []string
	}{
		{"issue", []string{"r-0-ü", "r-0-u", "r-1002-ü", "r-1003-ü", ""}, []string{"r-0-ü", "r-1002-ü"}},
		{"user", []string{"r-500-ü", "R-500-ü"}, []string{"r-500-ü"}},
		{"other", []string{"r-0-ü"}, nil},
		{"issue", nil, nil},
	} {
		held, err := s.Holds(ctx, c.model, c.ask)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range c.ask {
			if held[r] {
				got = append(got, r)
			}
		}
		if !slices.Equal(got, c.want) || len(held) != len(c.want) {
			t.Errorf("model %s, asked %q: held %q, want %q", c.model, c.ask, got, c.want)
		}
	}
	for model, want := range map[string]int{"issue": n, "user": n, "other": 0} {
		if got, err := s.Resources(ctx, model); err != nil || got != want {
			t.Errorf("model %s: %d resources, %v; want %d", model, got, err, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Fatalf("Close left %v, %v", left, err)
	}
}
