package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ReadFuzzSeed reads a Go fuzz corpus file (`go test fuzz v1`) that holds
// one []byte, such as the inputs in shared/repro that tests replay.
func ReadFuzzSeed(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	_, lit, _ := strings.Cut(string(b), "\n")
	lit = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(lit), "[]byte("), ")")
	v, err := strconv.Unquote(lit)
	if err != nil {
		return nil, fmt.Errorf("%s: not one []byte: %w", path, err)
	}
	return []byte(v), nil
}
