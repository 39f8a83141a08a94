// Package testenv names the services the tests use and starts their own
// when they need one to stop: PostgreSQL at $TANDEM_TEST_POSTGRES and
// Redis at $TANDEM_TEST_REDIS, by default the machine's own, and
// redis-server on a free port (StartRedis) for tests that kill it.
package testenv
