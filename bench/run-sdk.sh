#!/usr/bin/env bash
# run-sdk.sh: the in-process comparison of issue 2, peers and sluice in one
# run, same key distributions, limits never reached.
#
# Usage: bench/run-sdk.sh        (COUNT=5 BENCHTIME=1s OUT=/tmp/sluice-bench-sdk)
# Raw output (benchstat-friendly) goes to $OUT/*.txt; medians and ratios to
# the terminal.
set -euo pipefail
cd "$(dirname "$0")"
COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-1s}
OUT=${OUT:-/tmp/sluice-bench-sdk}
mkdir -p "$OUT"
. ./machine.sh

echo "== building"
x go test -c -o "$OUT/bench.test" .
x go build -o "$OUT/benchtable" ./cmd/benchtable

echo "== one hot key, 1 and 2 procs"
x "$OUT/bench.test" -test.run '^$' -test.bench '^BenchmarkHotKey$' -test.cpu 1,2 \
  -test.count "$COUNT" -test.benchtime "$BENCHTIME" | tee "$OUT/hotkey.txt"
echo "== 100k and 1M random keys, 2 procs"
x "$OUT/bench.test" -test.run '^$' -test.bench '^BenchmarkKeys$' -test.cpu 2 \
  -test.count "$COUNT" -test.benchtime "$BENCHTIME" | tee "$OUT/keys.txt"
echo "== bytes per idle key at 1M keys"
for i in 1 2 3; do x go run ./cmd/keymem -keys 1000000; done | tee "$OUT/keymem.txt"

echo "== medians (ratios: ns/op against the x/time/rate reference of each table)"
x "$OUT/benchtable" -ref xtime-one "$OUT/hotkey.txt"
x "$OUT/benchtable" -ref xtime-map -metrics ns/op,B/op,allocs/op,keys "$OUT/keys.txt"
x "$OUT/benchtable" -ref xtime-map -metrics B/key,live-B/key "$OUT/keymem.txt"
echo "== done $(date -u +%FT%TZ), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
