package redis

import (
	"context"
	"fmt"
	"log/slog"

	goredis "github.com/redis/go-redis/v9"
)

// RouteLogs sends go-redis's own messages (its pool's dial failures,
// which it also returns to the caller as errors) to log at debug level:
// left alone, the library prints them to the process's stderr in a format
// of its own, beside the commands' structured logs. go-redis keeps its
// logger in a package variable, so a command calls this once, first.
func RouteLogs(log *slog.Logger) { goredis.SetLogger(printer{log}) }

// printer is go-redis's Logging interface on a slog.Logger.
type printer struct{ log *slog.Logger }

func (p printer) Printf(ctx context.Context, format string, v ...any) {
	p.log.DebugContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}
