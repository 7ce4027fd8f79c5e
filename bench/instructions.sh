#!/usr/bin/env bash
# instructions.sh: CPU instructions per operation of Go benchmarks, counted
# by valgrind's callgrind: a measure that other load on the machine does not
# move, for comparing two benchmarks (or two versions of one) on a noisy box.
#
# Each benchmark runs twice under callgrind, N and 2N iterations, with only
# the benchmark function's calls counted (setup excluded); the difference
# divided by N is the cost of one iteration. Instruction counts ignore cache
# misses and stalls, so they rank CPU work, not wall time.
#
# Usage: bench/instructions.sh PACKAGE BENCHMARK... (N=50000)
#   bench/instructions.sh ./policy/ BenchmarkStoreTake BenchmarkCheckAppend
# COLLECT=all counts the whole process instead of the benchmark function:
# callgrind loses track of a function whose goroutine stack grows or that
# calls deep into other packages (the count then reads 0 or less); the
# setup, run for N and 2N alike, still cancels out.
# Needs valgrind (apt-get install valgrind).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,18p' "$0"; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cd "$(dirname "$0")/.."
pkg=$1; shift
N=${N:-50000}
WORK=$(mktemp -d /tmp/sluice-instr.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# go -C builds in the package's directory, so that bench/ (its own module) builds too.
go -C "$pkg" test -c -o "$WORK/bench.test" .
count() { # BENCH ITERATIONS -> instructions inside the benchmark function
  rm -f "$WORK"/cg.*
  toggle="--toggle-collect=*.$1"
  [ "${COLLECT:-}" = all ] && toggle=""
  # One P and no async preemption: callgrind then runs the benchmark as one
  # deterministic thread of Go code.
  GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 GOGC=off valgrind --tool=callgrind \
    --callgrind-out-file="$WORK/cg.%p" $toggle \
    "$WORK/bench.test" -test.run '^$' -test.bench "^$1\$" -test.benchtime "$2x" >/dev/null 2>&1
  awk '/^(summary|totals):/ {print $2; exit}' "$WORK"/cg.*
}
for b in "$@"; do
  one=$(count "$b" "$N"); two=$(count "$b" $((2 * N)))
  echo "$b $(( (two - one) / N )) instructions/op"
done
