// Package testenv names the services the tests use and starts their own
// when they need one to stop: PostgreSQL at $TANDEM_TEST_POSTGRES, with a
// schema of a test's own (PostgresSchema) for tests whose nodes must not
// share tables or a queue with another test's, Redis at $TANDEM_TEST_REDIS,
// by default the machine's own, redis-server on a free port
// (StartRedis) for tests that kill it, and a Redis Cluster of a test's
// own, masters with a replica each (StartRedisCluster), for tests that
// kill a master or move a slot.
//
// It also holds the helpers that tests of more than one package share:
// polling a condition with a deadline (WaitFor, WaitWithin), a logger
// that discards (QuietLogger), an in-memory last-seen store
// (MemoryLastSeen) and a reader of fuzz corpus files (ReadFuzzSeed). It
// imports nothing of the module, so any package's tests can use it; a
// shared fake that needs a module's types lives beside the interface it
// implements instead (doc/store's Down).
package testenv
