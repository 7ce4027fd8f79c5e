#!/usr/bin/env bash
# run-redis.sh: the Redis comparison (docs/benchmarks.md, Redis): peers and sluice's Redis
# store against one redis-server that the benchmark starts on a free
# loopback port, at 1, 16, 64 and 256 closed-loop callers, 10k keys.
#
# Usage: bench/run-redis.sh      (COUNT=3 BENCHTIME=2s OUT=/tmp/sluice-bench-redis)
set -euo pipefail
cd "$(dirname "$0")"
COUNT=${COUNT:-3}
BENCHTIME=${BENCHTIME:-2s}
OUT=${OUT:-/tmp/sluice-bench-redis}
mkdir -p "$OUT"
. ./machine.sh
# A failed benchmark (a setup check that did not hold) does not stop the
# others; the script exits 1 at the end.
fail=0
echo "redis: $(redis-server --version)"

echo "== building"
x go test -c -o "$OUT/bench.test" .
x go build -o "$OUT/benchtable" ./cmd/benchtable

echo "== decisions per second, latency, Redis work per decision"
x "$OUT/bench.test" -test.run '^$' -test.bench '^BenchmarkRedis$' -test.cpu 2 \
  -test.count "$COUNT" -test.benchtime "$BENCHTIME" | tee "$OUT/redis.txt" || fail=1
if "$OUT/bench.test" -test.list '^BenchmarkRedisOvershoot$' | grep -q .; then
  echo "== overshoot of periodic sync (limit reached on purpose)"
  x "$OUT/bench.test" -test.run '^$' -test.bench '^BenchmarkRedisOvershoot$' -test.cpu 2 \
    -test.count "$COUNT" -test.benchtime 1x | tee "$OUT/overshoot.txt" || fail=1
fi

echo "== medians (ratio: decisions/s against redis_rate at the same number of callers)"
x "$OUT/benchtable" -by 1 -ref redis_rate -metrics decisions/s,p50-us,p99-us,cmds/op,scripts/op,reads/op,allocs/op "$OUT/redis.txt"
[ -s "$OUT/overshoot.txt" ] && x "$OUT/benchtable" -by 1 -metrics limit,admitted/window,max-admitted/window,overshoot-%,windows "$OUT/overshoot.txt"
echo "== done $(date -u +%FT%TZ), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $fail = 1 ]; then echo "== some benchmarks FAILED their setup checks; see above"; fi
exit $fail
