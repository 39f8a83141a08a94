#!/usr/bin/env bash
# Runs go test with the given arguments; its output streams as it comes.
# With $TANDEM_TIMES set, each package's result line is also appended
# there as "go<TAB>package<TAB>seconds<TAB>ok|FAIL", for the table of
# times .ci/run prints. The exit status is go test's.
set -o pipefail
go test "$@" 2>&1 | awk -v out="${TANDEM_TIMES:-/dev/null}" '
  { print; fflush() }
  ($1 == "ok" || $1 == "FAIL") && $3 ~ /^[0-9.]+s$/ {
    printf "go\t%s\t%s\t%s\n", $2, substr($3, 1, length($3) - 1), $1 >> out
    fflush(out)
  }
  $1 == "FAIL" && $3 == "[build" { printf "go\t%s\t0\tFAIL (build)\n", $2 >> out; fflush(out) }'
