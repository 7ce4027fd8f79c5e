#!/usr/bin/env bash
# gateway.sh: load runs of the HTTP data plane (docs/benchmarks.md, Gateway), all on loopback.
#
# One round runs, against one upstream (nginx `return 200`):
#   nginx-proxy        nginx proxy_pass alone (keep-alive upstream)
#   nginx-limit-1      nginx proxy_pass + limit_req, one key ($binary_remote_addr)
#   nginx-limit-100k   nginx proxy_pass + limit_req keyed by a header over 100k values
#   sluice-proxy       sluice, a route, no plugin
#   sluice-rla-mem-1   sluice + rate-limiting-advanced, strategy local, by client IP (1 key)
#   sluice-rla-mem     sluice + rate-limiting-advanced, strategy local, by header (100k keys)
#   sluice-rla-redis0  the same with strategy redis, sync_rate 0
#   sluice-rla-redis01 the same with strategy redis, sync_rate 0.1
# Limits are never reached. Every run uses the same wrk script, which sends
# a random X-Client header out of 100k values.
#
# Every server starts once, on its own port, and is warmed up once: each of
# the 100k client ids once (bench/cmd/warmkeys), then 1 s of the load. The
# runs then alternate between running servers: a scenario's runs measure
# the steady state of a limiter that already holds its keys, as a
# long-running one does, and neighbouring runs are seconds apart, so that
# the machine's drift touches the scenarios of a round alike.
#
# Then, for the scenarios matching FIXED, the same rounds at a fixed request
# rate below saturation (open loop, bench/cmd/fixedrate on vegeta): the
# latency a proxy and its limiter add, which a saturated closed loop hides
# behind queueing.
#
# Usage: bench/gateway.sh            (ROUNDS=3 DURATION=8s CONNS=64 THREADS=2)
# Env:   ROUNDS, DURATION, CONNS, THREADS, ONLY (regexp over scenario names),
#        SLUICE (a prebuilt sluice binary; default: go build ./cmd/sluice),
#        RATE (fixed rate, req/s, default 5000; 0 skips that phase),
#        FIXED (regexp, default ^(nginx-proxy|sluice-proxy|sluice-rla-mem)$),
#        FIXED_DURATION (default 10s),
#        PERF (a directory: record `perf record -g` of sluice during each
#        closed-loop run there, as <scenario>.<round>.data; read it with
#        `perf report -i FILE` and a SLUICE binary that still exists).
# Output: tables of medians over the rounds and the ratios docs/benchmarks.md tracks;
# each sluice closed-loop line also gives the CPU time the sluice and
# redis-server processes spent per request (/proc/<pid>/stat), and with
# Redis the commands it ran per request (INFO commandstats).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
ONLY=${ONLY:-.}
RATE=${RATE:-5000}
FIXED=${FIXED:-^(nginx-proxy|sluice-proxy|sluice-rla-mem)$}
FIXED_DURATION=${FIXED_DURATION:-10s}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

for bin in nginx wrk redis-server curl go; do
  command -v "$bin" >/dev/null || { echo "gateway.sh: $bin not found (apt-get install nginx-light wrk redis-server curl)" >&2; exit 1; }
done
NGINX=$(command -v nginx)

WORK=$(mktemp -d /tmp/sluice-gw.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== machine"
uname -a
echo "nproc: $(nproc)"
grep -m1 'model name' /proc/cpuinfo || true
echo "date: $(date -u +%FT%TZ)   load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "sluice commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (work tree modified)')"
echo "nginx: $($NGINX -v 2>&1)   wrk: $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)   redis: $(redis-server --version | cut -d' ' -f3)"

. "$ROOT/bench/ports.sh"

# waitport PORT: poll until something answers HTTP on PORT, at most 20 s.
waitport() {
  local i
  for i in $(seq 1 200); do
    if curl -s -o /dev/null --max-time 0.5 "http://127.0.0.1:$1/"; then return 0; fi
    sleep 0.1
  done
  echo "gateway.sh: nothing answers on port $1 after 20s" >&2
  return 1
}


UP_PORT=$(freeport)
mkdir -p "$WORK/up" "$WORK/px"
cat > "$WORK/up/nginx.conf" <<NGX
daemon off;
worker_processes 1;
pid $WORK/up/nginx.pid;
error_log $WORK/up/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $WORK/up; proxy_temp_path $WORK/up; fastcgi_temp_path $WORK/up;
  uwsgi_temp_path $WORK/up; scgi_temp_path $WORK/up;
  server { listen 127.0.0.1:$UP_PORT; location / { return 200 "ok\n"; } }
}
NGX

# Each server's port (and sluice's admin port), by scenario.
declare -A PORT ADMIN PID
# nginx_proxy NAME LIMIT_DIRECTIVES: write a proxy config.
nginx_proxy() {
  PORT[$1]=$(freeport)
  cat > "$WORK/px/$1.conf" <<NGX
daemon off;
worker_processes auto;
pid $WORK/px/$1.pid;
error_log $WORK/px/$1.error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $WORK/px; proxy_temp_path $WORK/px; fastcgi_temp_path $WORK/px;
  uwsgi_temp_path $WORK/px; scgi_temp_path $WORK/px;
  limit_req_zone \$binary_remote_addr zone=one:10m rate=100000000r/s;
  limit_req_zone \$http_x_client zone=many:64m rate=100000000r/s;
  upstream up { server 127.0.0.1:$UP_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:${PORT[$1]};
    location / {
      $2
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://up;
    }
  }
}
NGX
}
nginx_proxy nginx-proxy ""
nginx_proxy nginx-limit-1 "limit_req zone=one burst=100000000 nodelay;"
nginx_proxy nginx-limit-100k "limit_req zone=many burst=100000000 nodelay;"

# The wrk script every run uses: a random client id out of 100k per request.
cat > "$WORK/clients.lua" <<'LUA'
math.randomseed(os.time())
request = function()
  return wrk.format(nil, nil, { ["X-Client"] = tostring(math.random(1, 100000)) })
end
LUA

# sluice configs (Kong declarative format).
REDIS_PORT=$(freeport)
sluice_conf() { # NAME PLUGINS_YAML
  PORT[$1]=$(freeport)
  ADMIN[$1]=$(freeport)
  cat > "$WORK/$1.yml" <<YML
_format_version: "3.0"
services:
  - name: up
    url: http://127.0.0.1:$UP_PORT
    routes:
      - name: all
        paths: ["/"]
$2
YML
}
# rla STRATEGY SYNC_RATE NAMESPACE [ip]: the plugin, by X-Client (100k
# keys) with a limit of 100000 an hour, or by client IP (one key, which the
# whole load hits: a limit of 10^9).
rla() {
  local ident="identifier: header
      header_name: X-Client" limit=100000
  [ "${4:-}" = ip ] && ident="identifier: ip" limit=1000000000
  cat <<YML
plugins:
  - name: rate-limiting-advanced
    config:
      $ident
      limit: [$limit]
      window_size: [3600]
      window_type: sliding
      namespace: $3
      strategy: $1
      sync_rate: $2
      redis:
        host: 127.0.0.1
        port: $REDIS_PORT
YML
}
sluice_conf sluice-proxy ""
sluice_conf sluice-rla-mem-1 "$(rla local -1 bench ip)"
sluice_conf sluice-rla-mem "$(rla local -1 bench)"
sluice_conf sluice-rla-redis0 "$(rla redis 0 bench0)"
sluice_conf sluice-rla-redis01 "$(rla redis 0.1 bench01)"

SCENARIOS=(nginx-proxy nginx-limit-1 nginx-limit-100k sluice-proxy sluice-rla-mem-1 sluice-rla-mem sluice-rla-redis0 sluice-rla-redis01)
SEL=()
for s in "${SCENARIOS[@]}"; do [[ $s =~ $ONLY ]] && SEL+=("$s"); done

need_sluice=0; need_redis=0
for s in "${SEL[@]}"; do
  [[ $s == sluice-* ]] && need_sluice=1
  [[ $s == *redis* ]] && need_redis=1
done
if [ $need_sluice = 1 ]; then
  if [ -n "${SLUICE:-}" ]; then BIN=$SLUICE; else
    BIN=$WORK/sluice
    echo "+ (cd $ROOT && go build -o $BIN ./cmd/sluice)"
    (cd "$ROOT" && go build -o "$BIN" ./cmd/sluice)
  fi
  for s in "${SEL[@]}"; do
    [[ $s == sluice-* ]] || continue
    "$BIN" validate "$WORK/$s.yml" >/dev/null || { echo "gateway.sh: sluice rejects $s.yml:"; cat "$WORK/$s.yml"; exit 1; }
  done
fi

echo "+ (cd $ROOT/bench && go build -o $WORK/warmkeys ./cmd/warmkeys)"
(cd "$ROOT/bench" && go build -o "$WORK/warmkeys" ./cmd/warmkeys)

echo "== upstream"
"$NGINX" -p "$WORK/up" -c "$WORK/up/nginx.conf" & PIDS+=($!)
waitport "$UP_PORT"
REDIS_PID=""
if [ $need_redis = 1 ]; then
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --save "" --appendonly no >/dev/null & PIDS+=($!); REDIS_PID=$!
  for i in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

WRK=(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$WORK/clients.lua")
echo "== commands"
echo "upstream: $NGINX -p $WORK/up -c $WORK/up/nginx.conf   (nginx return 200, 1 worker)"
echo "nginx:    $NGINX -p $WORK/px -c $WORK/px/<scenario>.conf   (worker_processes auto: $(nproc))"
[ $need_sluice = 1 ] && echo "sluice:   $BIN run -c $WORK/<scenario>.yml --proxy-listen 127.0.0.1:<port> --admin-listen 127.0.0.1:<admin port> --access-log=false --watch=false --log-level warn"
echo "warm-up:  bench/cmd/warmkeys -url http://127.0.0.1:<port>/ -clients 100000 -connections $CONNS, then 1s of the load (once per server)"
echo "load:     ${WRK[*]} http://127.0.0.1:<port>/"
for s in "${SEL[@]}"; do case $s in
  nginx-*) echo "--- $s.conf (location /)"; grep -E 'limit_req |proxy_pass' "$WORK/px/$s.conf" | sed 's/^ */    /' ;;
  sluice-*) echo "--- $s.yml"; sed 's/^/    /' "$WORK/$s.yml" ;;
esac; done

# decisions prints the cumulative counts of sluice's decision-time histogram
# for rate-limiting-advanced, one "le count" line per bucket (a count of a
# million or more comes as 1.234567e+06, which awk reads as a number).
decisions() { # SCENARIO
  curl -s "http://127.0.0.1:${ADMIN[$1]}/metrics" |
    sed -nE 's/^sluice_plugin_decision_duration_seconds_bucket\{.*le="([^"]+)",plugin="rate-limiting-advanced"\} ([0-9.e+]+)$/\1 \2/p; s/^sluice_plugin_decision_duration_seconds_bucket\{plugin="rate-limiting-advanced",le="([^"]+)"\} ([0-9.e+]+)$/\1 \2/p'
}

# decisionp99 BEFORE AFTER prints, for the decisions made between the two
# snapshots (the plugin's own time per request, as sluice measures it), the
# upper bound in µs of the bucket holding the 99th percentile and the share
# of decisions within 100 µs: "100,99.5%".
decisionp99() {
  paste -d' ' <(echo "$1") <(echo "$2") | awk '
    { le[NR] = $3; n[NR] = $4 - $2 }
    END {
      total = n[NR]
      if (total <= 0) { print "-"; exit }
      for (i = 1; i <= NR; i++) if (le[i] + 0 == 0.0001) within = n[i]
      for (i = 1; i <= NR; i++) if (n[i] >= 0.99 * total) {
        if (le[i] == "+Inf") p = "inf"; else p = sprintf("%.0f", le[i] * 1e6)
        printf "%s,%.1f%%\n", p, 100 * within / total
        exit
      }
    }'
}

# start SCENARIO: start its server, check it, and warm it up.
start() {
  local s=$1 port=${PORT[$1]}
  case $s in
    nginx-*)
      "$NGINX" -p "$WORK/px" -c "$WORK/px/$s.conf" & PID[$s]=$! ;;
    sluice-*)
      "$BIN" run -c "$WORK/$s.yml" --proxy-listen "127.0.0.1:$port" --admin-listen "127.0.0.1:${ADMIN[$s]}" \
        --access-log=false --watch=false --log-level warn \
        >"$WORK/$s.log" 2>&1 & PID[$s]=$! ;;
  esac
  PIDS+=("${PID[$s]}")
  waitport "$port" || { cat "$WORK/$s.log" 2>/dev/null; return 1; }
  # The limiter must really be in the path: its headers on a response.
  if [[ $s == *-rla-* ]] && ! curl -s -D - -o /dev/null -H 'X-Client: probe' "http://127.0.0.1:$port/" | grep -qi '^ratelimit-limit\|^x-ratelimit-limit'; then
    echo "gateway.sh: $s answered without rate-limit headers" >&2; return 1
  fi
  "$WORK/warmkeys" -url "http://127.0.0.1:$port/" -clients 100000 -connections "$CONNS" >/dev/null
  wrk -t"$THREADS" -c"$CONNS" -d1s -s "$WORK/clients.lua" "http://127.0.0.1:$port/" >/dev/null
}

# run_one SCENARIO ROUND [fixed]: one measured run against its server.
run_one() {
  local s=$1 r=$2 pid=${PID[$1]} port=${PORT[$1]} out
  if [ "${3:-}" = fixed ]; then
    local before="" after="" dec="-"
    [[ $s == sluice-rla-* ]] && before=$(decisions "$s")
    if ! out=$("$WORK/fixedrate" -url "http://127.0.0.1:$port/" -rate "$RATE" -duration "$FIXED_DURATION" -connections "$CONNS"); then
      echo "gateway.sh: $s failed at the fixed rate: $out" >&2; return 1
    fi
    if [[ $s == sluice-rla-* ]]; then
      after=$(decisions "$s")
      dec=$(decisionp99 "$before" "$after")
      out="$out decision-p99-us<=${dec%%,*} decisions-within-100us=${dec#*,}"
    fi
    printf '%-20s round %d  fixed  %s\n' "$s" "$r" "$out"
    echo "$s $(sed -E 's/.*p50-us=([0-9]+).*p99-us=([0-9]+).*/\1 \2/' <<<"$out") $dec" >> "$WORK/fixed"
    return 0
  fi
  local c0 r0 cpu="" perfpid=""
  if [[ $s == sluice-* ]]; then
    [[ $s == *redis* ]] && redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
    c0=$(cputicks "$pid"); r0=$(cputicks "$REDIS_PID")
    if [ -n "${PERF:-}" ]; then
      perf record -F 499 -g -o "$PERF/$s.$r.data" -p "$pid" -- sleep "$(( ${DURATION%s} - 1 ))" >/dev/null 2>&1 &
      perfpid=$!
    fi
  fi
  out=$("${WRK[@]}" "http://127.0.0.1:$port/")
  if [[ $s == sluice-* ]]; then
    cpu=$(awk -v c="$(( $(cputicks "$pid") - c0 ))" -v r="$(( $(cputicks "$REDIS_PID") - r0 ))" \
      -v n="$(awk '/requests in/ {print $1}' <<<"$out")" -v hz="$(getconf CLK_TCK)" \
      'BEGIN {printf "cpu-us/req sluice=%.1f redis=%.1f", c * 1e6 / hz / n, r * 1e6 / hz / n}')
    if [[ $s == *redis* ]]; then
      # Commands Redis ran per request (INFO commandstats, reset before the
      # run; every call, whatever the command, including those of the other
      # Redis scenario's idle server: its sweep).
      cpu="$cpu $(redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' |
        awk -F'[=,:]' -v n="$(awk '/requests in/ {print $1}' <<<"$out")" \
          '/^cmdstat_/ && $1 != "cmdstat_config|resetstat" {split($1, a, "_"); c[a[2]] += $3; t += $3}
           END {printf "redis-cmds/req=%.2f (incrby %.2f, get %.2f)", t / n, c["incrby"] / n, c["get"] / n}')"
    fi
  fi
  [ -z "$perfpid" ] || wait "$perfpid" || true
  if [[ $s == *-redis* ]] && [ "$(redis-cli -p "$REDIS_PORT" dbsize)" -lt 1000 ]; then
    echo "gateway.sh: $s left fewer than 1000 keys in Redis: it did not use it" >&2; return 1
  fi
  if grep -q 'Non-2xx' <<<"$out"; then
    echo "gateway.sh: $s answered non-2xx responses (the limit must never be reached):" >&2; echo "$out" >&2; return 1
  fi
  echo "$out" > "$WORK/result.$s.$r"
  local rps p50 p99 errs
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  printf '%-20s round %d  %10s req/s  p50 %8s  p99 %8s  %s%s\n' "$s" "$r" "$rps" "$p50" "$p99" "$cpu" "$errs"
  echo "$s $rps $(tous "$p50") $(tous "$p99")" >> "$WORK/results"
}

# cputicks PID: the user and system CPU time of a process, in clock ticks
# (0 for no PID: no redis-server in this run).
cputicks() { if [ -n "$1" ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo 0; fi; }

# tous converts wrk's latency ("812.00us", "1.23ms", "1.01s") to microseconds.
tous() {
  awk -v v="$1" 'BEGIN {
    n = v + 0
    if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /s$/) print n * 1000000; else print n }'
}

# order ROUND NAME...: the names, reversed on even rounds, so that no
# scenario always runs first or right after the same other one.
order() {
  local r=$1; shift
  if (( r % 2 )); then printf '%s\n' "$@"; else printf '%s\n' "$@" | tac; fi
}

echo "== servers: starting and warming up ${SEL[*]}"
for s in "${SEL[@]}"; do start "$s"; done
sleep 2 # the periodic-sync servers push what their warm-up counted

echo "== runs ($ROUNDS rounds; within a round the scenarios run back to back, in reverse order on even rounds)"
: > "$WORK/results"
for r in $(seq 1 "$ROUNDS"); do
  for s in $(order "$r" "${SEL[@]}"); do run_one "$s" "$r"; done
done

echo "== medians over $ROUNDS rounds"
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
declare -A RPS P50 P99
for s in "${SEL[@]}"; do
  RPS[$s]=$(awk -v s="$s" '$1==s {print $2}' "$WORK/results" | median)
  P50[$s]=$(awk -v s="$s" '$1==s {print $3}' "$WORK/results" | median)
  P99[$s]=$(awk -v s="$s" '$1==s {print $4}' "$WORK/results" | median)
done
ratio() { # A B -> A/B
  if [ -n "${RPS[$1]:-}" ] && [ -n "${RPS[$2]:-}" ]; then awk -v a="${RPS[$1]}" -v b="${RPS[$2]}" 'BEGIN {printf "%.2f", a / b}'; else echo "-"; fi
}
printf '| %-20s | %10s | %9s | %9s | %13s |\n' scenario "req/s" "p50 us" "p99 us" "vs nginx-proxy"
printf '|%s|%s|%s|%s|%s|\n' "----------------------" "------------" "-----------" "-----------" "---------------"
for s in "${SEL[@]}"; do
  printf '| %-20s | %10.0f | %9.0f | %9.0f | %13s |\n' "$s" "${RPS[$s]}" "${P50[$s]}" "${P99[$s]}" "$(ratio "$s" nginx-proxy)"
done
echo
echo "ratios (the targets in docs/benchmarks.md):"
echo "  sluice-rla-mem / sluice-proxy        = $(ratio sluice-rla-mem sluice-proxy)   (target >= 0.95)"
echo "  sluice-rla-mem / nginx-limit-100k    = $(ratio sluice-rla-mem nginx-limit-100k)   (target >= 0.6, stretch 0.8)"
echo "  sluice-rla-mem-1 / nginx-limit-1     = $(ratio sluice-rla-mem-1 nginx-limit-1)   (one key each)"
echo "  sluice-rla-mem-1 / sluice-proxy      = $(ratio sluice-rla-mem-1 sluice-proxy)"
echo "  sluice-rla-redis01 / sluice-rla-mem  = $(ratio sluice-rla-redis01 sluice-rla-mem)   (target >= 0.9)"
echo "  sluice-rla-redis0 / sluice-rla-mem   = $(ratio sluice-rla-redis0 sluice-rla-mem)"
if [ -n "${P99[sluice-rla-mem]:-}" ] && [ -n "${P99[sluice-proxy]:-}" ]; then
  echo "  p99 difference, saturated closed loop = $(awk -v a="${P99[sluice-rla-mem]}" -v b="${P99[sluice-proxy]}" 'BEGIN {printf "%.0f us", a - b}')   (queueing; see the fixed rate below)"
fi

FSEL=()
for s in "${SEL[@]}"; do [[ $s =~ $FIXED ]] && FSEL+=("$s"); done
if [ "$RATE" -gt 0 ] && [ ${#FSEL[@]} -gt 0 ]; then
  echo
  echo "== fixed rate: $RATE req/s for $FIXED_DURATION, $CONNS connections ($ROUNDS rounds)"
  echo "+ (cd $ROOT/bench && go build -o $WORK/fixedrate ./cmd/fixedrate)"
  (cd "$ROOT/bench" && go build -o "$WORK/fixedrate" ./cmd/fixedrate)
  : > "$WORK/fixed"
  for r in $(seq 1 "$ROUNDS"); do
    for s in $(order "$r" "${FSEL[@]}"); do run_one "$s" "$r" fixed; done
  done
  declare -A F50 F99 FDEC
  for s in "${FSEL[@]}"; do
    F50[$s]=$(awk -v s="$s" '$1==s {print $2}' "$WORK/fixed" | median)
    F99[$s]=$(awk -v s="$s" '$1==s {print $3}' "$WORK/fixed" | median)
    FDEC[$s]=$(awk -v s="$s" '$1==s {print $4}' "$WORK/fixed" | sort -u | tr '\n' ' ')
  done
  printf '| %-20s | %9s | %9s |\n' scenario "p50 us" "p99 us"
  printf '|%s|%s|%s|\n' "----------------------" "-----------" "-----------"
  for s in "${FSEL[@]}"; do printf '| %-20s | %9.0f | %9.0f |\n' "$s" "${F50[$s]}" "${F99[$s]}"; done
  if [ -n "${F99[sluice-rla-mem]:-}" ] && [ -n "${F99[sluice-proxy]:-}" ]; then
    echo "  p99 added by the decision (memory)   = $(awk -v a="${F99[sluice-rla-mem]}" -v b="${F99[sluice-proxy]}" 'BEGIN {printf "%.0f us", a - b}')   (target < 100 us)"
    echo "  p50 added by the decision (memory)   = $(awk -v a="${F50[sluice-rla-mem]}" -v b="${F50[sluice-proxy]}" 'BEGIN {printf "%.0f us", a - b}')"
  fi
  if [ -n "${FDEC[sluice-rla-mem]:-}" ]; then
    echo "  the decision's own time (memory), sluice's histogram, per round: p99 bucket bound (us),share within 100 us: ${FDEC[sluice-rla-mem]}  (target: p99 < 100 us)"
  fi
fi
