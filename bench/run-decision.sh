#!/usr/bin/env bash
# run-decision.sh: sluice-decision against envoyproxy/ratelimit and a bare
# grpc-go server (issue 16), over gRPC on loopback, with the closed-loop
# load generator bench/cmd/rlsload: ShouldRateLimit at 1, 16 and 64
# callers sharing 4 connections, one descriptor ([user]) or two ([user],
# [client]) per request, values drawn from 10k users, limits never reached.
#
# Servers, each started once on its own free port:
#   peer    envoyproxy/ratelimit, built from its Go module
#           (bench/peers/envoyratelimit/go.mod pins it; its own dependency
#           versions, which clash with sluice's)
#   sluice  sluice-decision (cmd/sluice-decision), synchronous Redis store
#           (every decision asks Redis, as the peer does)
#   bare    bench/cmd/rlsbare: grpc-go answering ShouldRateLimit with a
#           constant OK, one status per descriptor, no work: the floor
# sluice and bare serve calls on the same STREAM_WORKERS goroutines
# (grpc.NumStreamWorkers; default 64, sluice-decision's default); the peer
# is run as it comes.
# peer and sluice read the same file from the same runtime directory and
# the same environment (the peer's variables), and count in the same
# redis-server, flushed before each of their runs.
#
# Every round runs each descriptor count and caller count against peer,
# sluice and bare in turn, so that the machine's drift touches the three
# alike. Nothing is pinned with taskset: with 2 cores, the server, Redis
# and the load generator each need more than a core's share at some
# point, and other work on a shared machine runs on any core.
#
# Usage: bench/run-decision.sh      (ROUNDS=3 DURATION=5s WARMUP=1s OUT=/tmp/sluice-bench-decision)
# Env:   CALLERS (default "1 16 64"), DESCRIPTORS (default "1 2"),
#        STREAM_WORKERS (default 64; 0: a goroutine per call),
#        ONLY (regexp over peer|sluice|bare, default all),
#        PROFILE=1: a CPU profile of sluice-decision over each of its measured
#        runs, from its debug port, to $OUT/sluice-desc<d>-callers<c>-round<r>.pprof
#        (DURATION then in whole seconds, e.g. 10s),
#        SLUICE_DECISION, ENVOY_RATELIMIT (prebuilt binaries; default: built here)
# Output: one benchmark-format line per run ($OUT/decision.txt: decisions/s,
# p50/p99 µs, errors, CPU µs per decision of the server, redis-server and
# the load generator, Redis commands per decision), then tables of medians
# with the ratios to the peer and to the bare server. Exits 1 if any run
# had an error or sluice fell back to local counters.
set -euo pipefail
cd "$(dirname "$0")"
BENCH=$(pwd)
ROOT=$(cd .. && pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
CALLERS=${CALLERS:-1 16 64}
DESCRIPTORS=${DESCRIPTORS:-1 2}
ONLY=${ONLY:-.}
STREAM_WORKERS=${STREAM_WORKERS:-64}
OUT=${OUT:-/tmp/sluice-bench-decision}
PROFILE=${PROFILE:-}
if [ -n "$PROFILE" ] && ! [[ $DURATION =~ ^[0-9]+s$ ]]; then
  echo "run-decision.sh: PROFILE needs DURATION in whole seconds (e.g. 10s), got $DURATION" >&2; exit 1
fi
PEER_VERSION=$(cd peers/envoyratelimit && go list -m -f '{{.Version}}' github.com/envoyproxy/ratelimit)

for bin in redis-server redis-cli curl go; do
  command -v "$bin" >/dev/null || { echo "run-decision.sh: $bin not found (apt-get install redis-server redis-tools curl)" >&2; exit 1; }
done
mkdir -p "$OUT"
: > "$OUT/decision.txt"
. ./machine.sh
. ./ports.sh
echo "redis: $(redis-server --version | cut -d' ' -f3)   envoyproxy/ratelimit: $PEER_VERSION"

WORK=$(mktemp -d /tmp/sluice-decision.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== building"
x go build -o "$OUT/rlsload" ./cmd/rlsload
x go build -o "$OUT/rlsbare" ./cmd/rlsbare
x go build -o "$OUT/benchtable" ./cmd/benchtable
if [ -n "${SLUICE_DECISION:-}" ]; then cp "$SLUICE_DECISION" "$OUT/sluice-decision"
else (cd "$ROOT" && x go build -o "$OUT/sluice-decision" ./cmd/sluice-decision); fi
if [ -n "${ENVOY_RATELIMIT:-}" ]; then cp "$ENVOY_RATELIMIT" "$OUT/envoy-ratelimit"
else (cd peers/envoyratelimit && x go build -o "$OUT/envoy-ratelimit" github.com/envoyproxy/ratelimit/src/service_cmd); fi

# One configuration for both limiters, in envoyproxy/ratelimit's layout
# (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml): a counter per value of
# each key, a limit never reached.
mkdir -p "$WORK/runtime/ratelimit/config"
cat > "$WORK/runtime/ratelimit/config/bench.yaml" <<'YML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
YML
echo "== config ($WORK/runtime/ratelimit/config/bench.yaml)"
cat "$WORK/runtime/ratelimit/config/bench.yaml"

REDIS_PORT=$(freeport)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --save "" --appendonly no \
  --maxclients 10000 > "$OUT/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")

declare -A GRPC HTTP PID
GRPC[peer]=$(freeport); GRPC[sluice]=$(freeport); GRPC[bare]=$(freeport)
HTTP[peer]=$(freeport); HTTP[sluice]=$(freeport)
SLUICE_DEBUG=$(freeport)
# The peer's variables, for both limiters. USE_STATSD=false alone would
# make the peer print every statistic, each call's timer included, to
# stdout; DISABLE_STATS keeps the statistics counted (in both: the debug
# port turns sluice's on) and sends them nowhere. REDIS_TIMEOUT is the
# peer's default, given to sluice (whose default, 200 ms, would let a slow
# Redis call fall back to local counters). REDIS_POOL_SIZE,
# REDIS_PIPELINE_WINDOW and REDIS_PIPELINE_LIMIT stay at the peer's
# defaults (10, 0, 0).
LIMITER_ENV=(REDIS_URL="127.0.0.1:$REDIS_PORT" REDIS_SOCKET_TYPE=tcp REDIS_TIMEOUT=10s
  RUNTIME_ROOT="$WORK/runtime" RUNTIME_SUBDIRECTORY=ratelimit
  USE_STATSD=false DISABLE_STATS=true LOG_LEVEL=warn
  GRPC_HOST=127.0.0.1 HOST=127.0.0.1 DEBUG_HOST=127.0.0.1)
echo "== environment of both limiters: ${LIMITER_ENV[*]} GRPC_PORT PORT DEBUG_PORT"
env "${LIMITER_ENV[@]}" GRPC_PORT="${GRPC[peer]}" PORT="${HTTP[peer]}" DEBUG_PORT="$(freeport)" \
  "$OUT/envoy-ratelimit" > "$OUT/peer.log" 2>&1 &
PID[peer]=$!
PIDS+=("${PID[peer]}")
echo "== sluice and bare: $STREAM_WORKERS gRPC stream workers"
env "${LIMITER_ENV[@]}" GRPC_PORT="${GRPC[sluice]}" PORT="${HTTP[sluice]}" DEBUG_PORT="$SLUICE_DEBUG" \
  SLUICE_GRPC_STREAM_WORKERS="$STREAM_WORKERS" "$OUT/sluice-decision" > "$OUT/sluice.log" 2>&1 &
PID[sluice]=$!
PIDS+=("${PID[sluice]}")
"$OUT/rlsbare" -grpc "127.0.0.1:${GRPC[bare]}" -stream-workers "$STREAM_WORKERS" > "$OUT/bare.log" 2>&1 &
PID[bare]=$!
PIDS+=("${PID[bare]}")

for s in peer sluice bare; do
  "$OUT/rlsload" -addr "127.0.0.1:${GRPC[$s]}" -wait 30s -requests 1 -users 1 > /dev/null \
    || { echo "run-decision.sh: $s does not answer on ${GRPC[$s]}; its log:" >&2; tail -20 "$OUT/$s.log" >&2; exit 1; }
done

fail=0
# fallbacks: how often sluice's Redis store turned to local counters.
fallbacks() {
  curl -s "http://127.0.0.1:${HTTP[sluice]}/metrics" |
    awk '/^sluice_redis_state_changes_total\{.*state="fallback"/ { n += $NF } END { print n + 0 }'
}
echo "== runs (each: ${WARMUP} warm-up, ${DURATION} measured)"
for round in $(seq 1 "$ROUNDS"); do
  for d in $DESCRIPTORS; do
    for c in $CALLERS; do
      for s in peer sluice bare; do
        [[ $s =~ $ONLY ]] || continue
        [ "$s" = bare ] || redis-cli -p "$REDIS_PORT" FLUSHALL > /dev/null
        prof=
        if [ -n "$PROFILE" ] && [ "$s" = sluice ]; then
          # The measured part only: the warm-up first, then DURATION.
          (sleep "$WARMUP" && curl -sf -o "$OUT/sluice-desc$d-callers$c-round$round.pprof" \
            "http://127.0.0.1:$SLUICE_DEBUG/debug/pprof/profile?seconds=${DURATION%s}") &
          prof=$!
        fi
        "$OUT/rlsload" -addr "127.0.0.1:${GRPC[$s]}" -callers "$c" -descriptors "$d" -conns 4 -users 10000 \
          -warmup "$WARMUP" -duration "$DURATION" -server-pid "${PID[$s]}" \
          -redis "127.0.0.1:$REDIS_PORT" -redis-pid "$REDIS_PID" \
          -name "Decision/desc=$d/callers=$c/$s" | tee -a "$OUT/decision.txt" || fail=1
        if [ -n "$prof" ] && ! wait "$prof"; then
          echo "run-decision.sh: the CPU profile of sluice-decision failed" >&2; fail=1
        fi
        if ! kill -0 "${PID[$s]}" 2>/dev/null; then
          echo "run-decision.sh: $s exited; its log:" >&2; tail -20 "$OUT/$s.log" >&2; exit 1
        fi
      done
    done
  done
  echo "-- round $round done $(date -u +%TZ), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
done
if [[ sluice =~ $ONLY ]] && [ "$(fallbacks)" != 0 ]; then
  echo "== sluice-decision fell back to local counters $(fallbacks) times: its figures are not Redis'"
  fail=1
fi

echo "== medians over $ROUNDS rounds (ratio: decisions/s against the peer)"
x "$OUT/benchtable" -by -1 -ref peer \
  -metrics decisions/s,p50-us,p99-us,server-us/op,redis-us/op,client-us/op,redis-cmds/op,errors "$OUT/decision.txt"
echo "== medians (ratio: decisions/s against the bare grpc-go server)"
x "$OUT/benchtable" -by -1 -ref bare -metrics decisions/s "$OUT/decision.txt"
echo "== done $(date -u +%FT%TZ), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw lines: $OUT/decision.txt; server logs: $OUT/{peer,sluice,bare,redis}.log"
if [ $fail = 1 ]; then echo "== some runs FAILED (errors, non-OK answers or fallbacks); see above"; fi
exit $fail
