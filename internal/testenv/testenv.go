package testenv

import "os"

// PostgresURL is the PostgreSQL the tests connect to.
func PostgresURL() string {
	if u := os.Getenv("TANDEM_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}
