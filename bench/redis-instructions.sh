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
#   take.lua, 1 and 10 decisions per call (one sliding-window limit each)
#   take.lua with counters packed as three doubles (struct.pack) instead of
#     "s c p" text: a prototype made here with sed, not sluice's format
#   redis_rate's GCRA script (from the Go module cache), 1 decision per call
#   sync.lua, 100 counters per call
#   journal.lua, 1000 members per call (the caller's first call: members
#     recorded, no lookup of previous scores)
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

sed -e "s/string\.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)\$')/struct.unpack('<ddd', v)/" \
    -e "s/string\.format('%d %d %d', S\[key\], C\[key\], P\[key\])/struct.pack('<ddd', S[key], C[key], P[key])/" \
    "$LUA/take.lua" > "$WORK/take-packed.lua"
grep -q "struct.pack" "$WORK/take-packed.lua" || { echo "redis-instructions.sh: the packed prototype no longer applies to take.lua" >&2; exit 1; }

rr=$(go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10)/lua.go
awk '/allowN = redis.NewScript\(`/ {p = 1; next} p && /^`\)/ {exit} p' "$rr" > "$WORK/redis_rate.lua"
[ -s "$WORK/redis_rate.lua" ] || { echo "redis-instructions.sh: redis_rate's script not found in $rr" >&2; exit 1; }

echo "== $(redis-server --version | cut -d' ' -f1-3), N=$N calls per case; instructions inside EVALSHA"
echo "take.lua, 1 decision per call:            $(take "$LUA/take.lua" 1) (decision)"
echo "take.lua, 10 decisions per call:          $(take "$LUA/take.lua" 10) (decision)"
echo "take.lua packed prototype, 10 per call:   $(take "$WORK/take-packed.lua" 10) (decision)"
echo "redis_rate, 1 decision per call:          $(count "$WORK/redis_rate.lua" 1 rate:k1 -- 1000000000 1000000000 1 1) (decision)"
keys=(); args=("" 0)
for r in $(seq 100); do keys+=("sluice:{2:k$r}:5"); args+=(1 3600000 1796083200000 3 0 0); done
echo "sync.lua, 100 counters per call:          $(count "$LUA/sync.lua" 100 "${keys[@]}" -- "${args[@]}") (counter)"
members=()
for r in $(seq 1000); do members+=("5:k$r"); done
echo "journal.lua, 1000 members per call:       $(count "$LUA/journal.lua" 1000 j s m -- "" -1 "" 10000 "${members[@]}") (member)"
