#!/usr/bin/env bash
# run-sdk.sh: the in-process comparison (docs/benchmarks.md, In process), peers and sluice in one
# run, same key distributions, limits never reached.
#
# Usage: bench/run-sdk.sh   (COUNT=5 KEYS_COUNT=3 MEM_COUNT=2 BENCHTIME=1s OUT=/tmp/sluice-bench-sdk)
# COUNT repeats the hot-key runs, KEYS_COUNT the 100k/1M-key runs (each
# repetition refills every limiter with the keys), MEM_COUNT the memory
# measurement. The defaults take about 7 minutes on 2 idle cores.
# Raw output (benchstat-friendly) goes to $OUT/*.txt; medians and ratios to
# the terminal.
set -euo pipefail
cd "$(dirname "$0")"
COUNT=${COUNT:-5}
KEYS_COUNT=${KEYS_COUNT:-3}
MEM_COUNT=${MEM_COUNT:-2}
BENCHTIME=${BENCHTIME:-1s}
OUT=${OUT:-/tmp/sluice-bench-sdk}
mkdir -p "$OUT"
. ./machine.sh
# A failed benchmark (a setup check that did not hold) does not stop the
# others; the script exits 1 at the end.
fail=0

echo "== building"
x go test -c -o "$OUT/bench.test" .
x go build -o "$OUT/benchtable" ./cmd/benchtable
x go build -o "$OUT/keymem" ./cmd/keymem

echo "== one hot key, 1 and 2 procs"
x "$OUT/bench.test" -test.run '^$' -test.bench '^BenchmarkHotKey$' -test.cpu 1,2 \
  -test.count "$COUNT" -test.benchtime "$BENCHTIME" | tee "$OUT/hotkey.txt" || fail=1
echo "== 100k and 1M random keys, 2 procs"
x "$OUT/bench.test" -test.run '^$' -test.bench '^BenchmarkKeys$' -test.cpu 2 \
  -test.count "$KEYS_COUNT" -test.benchtime "$BENCHTIME" | tee "$OUT/keys.txt" || fail=1
echo "== bytes per idle key at 1M keys"
for i in $(seq 1 "$MEM_COUNT"); do x "$OUT/keymem" -keys 1000000; done | tee "$OUT/keymem.txt" || fail=1

echo "== medians (ratios: ns/op against the x/time/rate reference of each table)"
x "$OUT/benchtable" -ref xtime-one "$OUT/hotkey.txt"
x "$OUT/benchtable" -ref xtime-map -metrics ns/op,B/op,allocs/op,keys "$OUT/keys.txt"
x "$OUT/benchtable" -ref xtime-map -metrics B/key,live-B/key "$OUT/keymem.txt"
echo "== done $(date -u +%FT%TZ), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $fail = 1 ]; then echo "== some benchmarks FAILED their setup checks; see above"; fi
exit $fail
