#!/usr/bin/env bash
# redis-instructions.sh: CPU instructions redis-server spends per call of
# sluice's Lua scripts (and of go-redis/redis_rate's, for comparison),
# counted by valgrind's callgrind inside the server: a measure that other
# load on the machine does not move.
#
# Each case starts its own redis-server under callgrind, counting only the
# EVALSHA command (the script and every command it runs), sends the same
# call N times with redis-benchmark (one at a time), and prints the
# instructions per call and per decision (or per counter, per member).
# The keys are written by the first call and exist for the others.
#
# Cases:
#   plain commands: what a synchronous decision of one sliding-window limit
#     sends (INCRBY, GET of the previous window, and PEXPIRE, which a node
#     sends once per window and key), pipelined 64 decisions deep with
#     redis-cli --pipe; whole-process instructions per decision, less an
#     idle server's (this case counts the server's own networking too)
#   take.lua, 1 and 10 decisions per call (one sliding-window limit each;
#     take.lua decides windows only in requests that also hold a token
#     bucket)
#   redis_rate's GCRA script (from the Go module cache), 1 decision per call
#   sync.lua, 100 token buckets per call (window counters are pushed with
#     plain INCRBY, as in the first case)
#   journal.lua, 1000 members per call (one log entry; the caller's first
#     call, so nothing to read back)
#
# Usage: bench/redis-instructions.sh     (N=300)
# Needs valgrind, redis-server, redis-cli, redis-benchmark (redis-tools).
set -euo pipefail
cd "$(dirname "$0")"
for bin in valgrind redis-server redis-cli redis-benchmark go; do
  command -v "$bin" >/dev/null || { echo "redis-instructions.sh: $bin not found (apt-get install valgrind redis-server redis-tools)" >&2; exit 1; }
done
N=${N:-300}
LUA=../ratelimit/redisstore/lua
WORK=$(mktemp -d /tmp/sluice-rinstr.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. ./ports.sh
PORT=$(freeport)

# count SCRIPT UNITS KEYS... -- ARGS...: instructions per EVALSHA of SCRIPT
# with KEYS and ARGS, divided by UNITS for the second figure.
count() {
  local script=$1 units=$2; shift 2
  local keys=() args=()
  while [ "$1" != -- ]; do keys+=("$1"); shift; done
  shift; args=("$@")
  rm -f "$WORK"/cg.*
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" --toggle-collect=evalShaCommand \
    redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" >/dev/null 2>&1 &
  local vp=$! i
  for i in $(seq 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  local sha
  sha=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat "$script")")
  redis-benchmark -p "$PORT" -n "$N" -c 1 -q EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" "${args[@]}" >/dev/null 2>&1
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  wait "$vp" || true
  local total
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$WORK"/cg.*)
  echo "$((total / N)) per call, $((total / N / units)) per unit"
}

# take.lua arguments: R requests, min TTL 0, one plan (cost 1, penalty, one
# sliding limit of 1e9 per second), then per request Redis' time and plan 1.
take() { # SCRIPT R
  local keys=() reqs=() r
  for r in $(seq "$2"); do keys+=("sluice:{2:k$r}:5"); reqs+=("" 1); done
  count "$1" "$2" "${keys[@]}" -- "$2" 0 1 1 1 1 1 1000000000 1000 0 "${reqs[@]}"
}

rr=$(go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10)/lua.go
awk '/allowN = redis.NewScript\(`/ {p = 1; next} p && /^`\)/ {exit} p' "$rr" > "$WORK/redis_rate.lua"
[ -s "$WORK/redis_rate.lua" ] || { echo "redis-instructions.sh: redis_rate's script not found in $rr" >&2; exit 1; }

# plain N: whole-process instructions of redis-server per decision sent as
# plain commands, N decisions through redis-cli --pipe, less those of a
# server that received only PING.
plain() {
  local n=$1 total base
  whole() { # FILE: instructions of a server fed FILE
    rm -f "$WORK"/cg.*
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" \
      redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" --hz 1 >/dev/null 2>&1 &
    local vp=$! i
    for i in $(seq 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$PORT" --pipe < "$1" >/dev/null
    redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
    wait "$vp" || true
    awk '/^(summary|totals):/ {print $2; exit}' "$WORK"/cg.*
  }
  : > "$WORK/idle.txt"
  awk -v n="$n" 'BEGIN {
    for (i = 0; i < n; i++) {
      k = "sluice:{2:k" (i % 100) "}:5"
      printf "*3\r\n$6\r\nINCRBY\r\n$%d\r\n%s:1796083200000\r\n$1\r\n1\r\n", length(k) + 14, k
      printf "*2\r\n$3\r\nGET\r\n$%d\r\n%s:1796083199000\r\n", length(k) + 14, k
      if (i < 100) printf "*3\r\n$7\r\nPEXPIRE\r\n$%d\r\n%s:1796083200000\r\n$7\r\n3600000\r\n", length(k) + 14, k
    }
  }' > "$WORK/plain.txt"
  total=$(whole "$WORK/plain.txt")
  base=$(whole "$WORK/idle.txt")
  echo "$(( (total - base) / n )) per decision"
}

echo "== $(redis-server --version | cut -d' ' -f1-3), N=$N calls per case; instructions inside EVALSHA"
echo "plain commands (INCRBY, GET; PEXPIRE once per key): $(plain $((N * 100)))"
echo "take.lua, 1 decision per call:            $(take "$LUA/take.lua" 1) (decision)"
echo "take.lua, 10 decisions per call:          $(take "$LUA/take.lua" 10) (decision)"
echo "redis_rate, 1 decision per call:          $(count "$WORK/redis_rate.lua" 1 rate:k1 -- 1000000000 1000000000 1 1) (decision)"
keys=(); args=("" 0)
for r in $(seq 100); do keys+=("sluice:{2:k$r}:5"); args+=(3000); done
echo "sync.lua, 100 buckets per call:           $(count "$LUA/sync.lua" 100 "${keys[@]}" -- "${args[@]}") (bucket)"
entry=""
for r in $(seq 1000); do m="5:k$r"; entry+="${#m}:$m"; done
echo "journal.lua, 1000 members per call:       $(count "$LUA/journal.lua" 1000 j s m -- "" -1 "" 10000 "$entry") (member)"
