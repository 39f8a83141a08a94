package redisbus

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tandemhq/tandem/internal/testenv"
)

func TestMain(m *testing.M) {
	LogTo(testenv.QuietLogger())
	// go-redis's pool waits a second after a failed dial before it gives
	// up, past the client's Close.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
