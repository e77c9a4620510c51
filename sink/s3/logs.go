package s3

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/smithy-go/logging"
)

// sdkLogger routes the AWS SDK's own log lines (its "falling back to
// IMDSv1" warning, say) through slog.Default(), which the commands set to
// their logger, so that they follow -v, -q and --log-format json instead
// of being written as plain text on os.Stderr.
type sdkLogger struct{}

// Logf implements logging.Logger: warnings at WARN, the rest at DEBUG.
func (sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	slog.Default().Log(context.Background(), level, fmt.Sprintf(format, v...), "from", "aws-sdk")
}
