package sink

import (
	"context"
	"fmt"
)

// Empty reports whether a sink holds no metas (of models, when not nil:
// a sink filtered to some models may share its store with others), so
// that a point-in-time restore can refuse to mix the past into a sink
// already in use. A sink
// that cannot list its metas (no Lister, or a store whose models cannot be
// told apart) is an error: whether it is empty cannot be known.
func Empty(ctx context.Context, s Sink, models []string) (bool, error) {
	ls, ok := s.(Lister)
	if !ok {
		return false, fmt.Errorf("sink %T cannot list what it holds", s)
	}
	if models == nil {
		var err error
		if models, err = ls.Models(ctx); err != nil {
			return false, fmt.Errorf("list models: %w", err)
		}
	}
	for _, m := range models {
		for _, err := range ls.ResourceIDs(ctx, m) {
			if err != nil {
				return false, fmt.Errorf("list resources of model %q: %w", m, err)
			}
			return false, nil
		}
	}
	return true, nil
}
