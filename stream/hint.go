package stream

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// errCodeInvalidConfig is the JetStream API error code of a stream
// configuration the server refuses (JSStreamInvalidConfigF).
const errCodeInvalidConfig = 10052

// explainConfigError adds to a server's refusal of the stream settings
// want what to change, where the code alone (err_code=10052) does not say.
func explainConfigError(err error, want jetstream.StreamConfig) error {
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != errCodeInvalidConfig {
		return err
	}
	if want.MaxAge > 0 && want.Duplicates > want.MaxAge {
		return fmt.Errorf("%w (the duplicate window, %v, may not be longer than max-age, %v: give --duplicate-window %v or less, or a longer --max-age)",
			err, want.Duplicates, want.MaxAge, want.MaxAge)
	}
	return fmt.Errorf("%w (the server refuses these settings together; `replicator stream info` shows the current ones)", err)
}
