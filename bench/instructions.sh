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
# A sub-benchmark is named with slashes, each level matched whole:
#   bench/instructions.sh ./ratelimit/redisstore/ BenchmarkTake/sync/callers=1
# COLLECT=all counts the whole process instead of the benchmark function:
# callgrind loses track of a function whose goroutine stack grows or that
# calls deep into other packages (the count then reads 0 or less); the
# setup, run for N and 2N alike, still cancels out. A sub-benchmark is
# always counted this way (its function is a closure run on a goroutine of
# its own), and so is any benchmark whose work runs on other goroutines
# (callers, a Redis client's reader and writer).
#
# Benchmarks that start a server (a test redis-server): callgrind aborts
# with an assertion in its signal handling when the child exits at the
# end (SIGCHLD), before it writes its counts, and the count read 0. So
# callgrind dumps its counts each time testing.(*B).StopTimer is entered
# (--dump-before; the testing package calls it after every run of a
# benchmark function, before the benchmark's cleanups stop its server),
# and the count is the sum of the dumps: what runs after the last one
# (the cleanups, the exit) is lost, the same for N and 2N. A run that
# leaves no count fails instead of printing 0.
# Needs valgrind (apt-get install valgrind).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,34p' "$0"; exit 2; }
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
  case "$1" in */*) toggle="" ;; esac
  [ "${COLLECT:-}" = all ] && toggle=""
  # BenchmarkA/b/c -> ^BenchmarkA$/^b$/^c$: -test.bench matches each level
  # apart, so b alone would also run b_other.
  local re
  re=$(printf '%s' "$1" | sed 's|/|$/^|g; s|^|^|; s|$|$|')
  # One P and no async preemption: callgrind then runs the benchmark as one
  # deterministic thread of Go code.
  GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 GOGC=off valgrind --tool=callgrind \
    --callgrind-out-file="$WORK/cg.%p" $toggle '--dump-before=testing.(*B).StopTimer' \
    "$WORK/bench.test" -test.run '^$' -test.bench "$re" -test.benchtime "$2x" >"$WORK/out" 2>&1 || true
  # One total per dump file (the last one is empty when callgrind aborted).
  local total
  total=$(awk 'FNR == 1 {seen = 0} !seen && /^(summary|totals):/ {s += $2; seen = 1} END {print s + 0}' "$WORK"/cg.*)
  if [ "$total" = 0 ] || ! grep -q "^Benchmark" "$WORK/out" || grep -q -- "--- FAIL" "$WORK/out"; then
    echo "instructions.sh: $1 ($2 iterations) left no count or did not run; its output:" >&2
    grep -v '^==' "$WORK/out" | tail -20 >&2
    exit 1
  fi
  echo "$total"
}
for b in "$@"; do
  one=$(count "$b" "$N"); two=$(count "$b" $((2 * N)))
  echo "$b $(( (two - one) / N )) instructions/op"
done
