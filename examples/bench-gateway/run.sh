#!/usr/bin/env bash
# Load runs of the gateway on loopback, same machine, same round:
#   nginx return 200 (upstream) <- nginx proxy_pass | nginx + limit_req |
#   sluice (no plugin) | sluice + rate-limiting-advanced (memory; Redis
#   sync_rate 0; Redis sync_rate 0.1)
# Usage: examples/bench-gateway/run.sh [seconds]   (needs wrk, nginx, redis-server)
set -euo pipefail
secs=${1:-8}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true; rm -rf "$work"' EXIT

cat >"$work/nginx.conf" <<NGX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  limit_req_zone \$binary_remote_addr zone=one:10m rate=1000000r/s;
  upstream up { server 127.0.0.1:18080; keepalive 128; }
  server { listen 127.0.0.1:18080; keepalive_timeout 75s; keepalive_requests 1000000; location / { return 200 "ok"; } }
  server { listen 127.0.0.1:18081; keepalive_requests 1000000;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } }
  server { listen 127.0.0.1:18082; keepalive_requests 1000000;
    location / { limit_req zone=one burst=1000000 nodelay; proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
NGX
nginx -c "$work/nginx.conf" -p "$work"
redis-server --port 16379 --save "" --appendonly no --dir "$work" --daemonize no >/dev/null &
for _ in $(seq 100); do redis-cli -p 16379 ping >/dev/null 2>&1 && break; sleep 0.1; done

cat >"$work/kong.yml" <<'YML'
_format_version: "3.0"
services:
  - name: up
    url: http://127.0.0.1:18080
    routes:
      - {name: plain, paths: [/plain]}
      - name: rla
        paths: [/rla]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [1000000000], window_size: [60], identifier: ip, namespace: bench}
      - name: redis0
        paths: [/redis0]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [1000000000], window_size: [60], identifier: ip, namespace: bench-r0,
                     strategy: redis, sync_rate: 0, redis: {host: 127.0.0.1, port: 16379}}
      - name: redis01
        paths: [/redis01]
        plugins:
          - name: rate-limiting-advanced
            config: {limit: [1000000000], window_size: [60], identifier: ip, namespace: bench-r01,
                     strategy: redis, sync_rate: 0.1, redis: {host: 127.0.0.1, port: 16379}}
YML
(cd "$root" && go build -o "$work/sluice" ./cmd/sluice)
"$work/sluice" run -c "$work/kong.yml" --proxy-listen 127.0.0.1:18090 --admin-listen 127.0.0.1:18091 \
  --access-log=false --watch=false --log-level warn >/dev/null &
for _ in $(seq 100); do curl -fs -o /dev/null 127.0.0.1:18090/plain && break; sleep 0.1; done

run() { # name url
  local out rps p99
  out=$(wrk -t2 -c64 -d"${secs}s" --latency "$2")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  printf '| %-34s | %10s | %8s |\n' "$1" "$rps" "$p99"
}
echo "| setup | req/s | p99 |"
echo "|---|---|---|"
run "nginx proxy_pass" http://127.0.0.1:18081/
run "nginx proxy_pass + limit_req" http://127.0.0.1:18082/
run "sluice, no plugin" http://127.0.0.1:18090/plain
run "sluice + RLA memory" http://127.0.0.1:18090/rla
run "sluice + RLA redis sync_rate 0" http://127.0.0.1:18090/redis0
run "sluice + RLA redis sync_rate 0.1" http://127.0.0.1:18090/redis01
