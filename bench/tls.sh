#!/usr/bin/env bash
# tls.sh: TLS HTTP/1.1 and HTTP/2 throughput of the proxy beside nginx
# (docs/benchmarks.md, TLS and HTTP/2), all on loopback, against one upstream (nginx `return 200`
# over plain HTTP with keep-alive).
#
# Servers, each on its own port, started once and warmed up:
#   nginx      nginx `listen ssl http2` + proxy_pass
#   sluice     sluice run --proxy-listen "... ssl http2" (HTTP/1.1 on fasthttp,
#              HTTP/2 on net/http feeding the same handler)
#   sluice-nh  (with SLUICE_NETHTTP set to a binary built with every TLS
#              connection sent to the net/http server: the alternative
#              design, for the h1 comparison: go build -tags sluice_nethttp
#              -o /tmp/sluice-nh ./cmd/sluice)
# Loads, alternated between servers in every round:
#   h1  wrk over TLS (HTTP/1.1 keep-alive)
#   h2  h2load (nghttp2-client), CONNS connections, STREAMS streams each
#
# Usage: bench/tls.sh   (ROUNDS=3 DURATION=6s CONNS=32 THREADS=2 STREAMS=10)
# Env: SLUICE (a prebuilt sluice), SLUICE_NETHTTP (see above).
# Output: req/s per run, then medians and ratios to nginx.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-6s}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
STREAMS=${STREAMS:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

for bin in nginx wrk h2load openssl curl go; do
  command -v "$bin" >/dev/null || { echo "tls.sh: $bin not found (apt-get install nginx-light wrk nghttp2-client openssl curl)" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/sluice-tls.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== machine"
uname -a
echo "nproc: $(nproc)   date: $(date -u +%FT%TZ)   load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "sluice commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (work tree modified)')"
echo "nginx: $(nginx -v 2>&1)   wrk: $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)   h2load: $(h2load --version | head -1)"

. "$ROOT/bench/ports.sh"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

UP=$(freeport)
cat > "$WORK/up.conf" <<NGX
daemon off; worker_processes 1; pid $WORK/up.pid; error_log $WORK/up.err warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK; uwsgi_temp_path $WORK; scgi_temp_path $WORK;
  server { listen 127.0.0.1:$UP; location / { return 200 "ok\n"; } } }
NGX
nginx -c "$WORK/up.conf" -p "$WORK" & PIDS+=($!)

declare -A PORT
PORT[nginx]=$(freeport)
cat > "$WORK/px.conf" <<NGX
daemon off; worker_processes auto; pid $WORK/px.pid; error_log $WORK/px.err warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK; uwsgi_temp_path $WORK; scgi_temp_path $WORK;
  upstream up { server 127.0.0.1:$UP; keepalive 128; }
  server { listen 127.0.0.1:${PORT[nginx]} ssl http2;
    ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGX
nginx -c "$WORK/px.conf" -p "$WORK" & PIDS+=($!)

cat > "$WORK/kong.yml" <<YML
_format_version: "3.0"
services:
- name: up
  url: http://127.0.0.1:$UP
  routes:
  - name: all
    paths: ["/"]
YML
SLUICE=${SLUICE:-}
if [ -z "$SLUICE" ]; then
  (cd "$ROOT" && go build -o "$WORK/sluice" ./cmd/sluice)
  SLUICE=$WORK/sluice
fi
SERVERS=(nginx sluice)
start_sluice() { # NAME BINARY
  PORT[$1]=$(freeport)
  "$2" run -c "$WORK/kong.yml" --admin-listen "" --access-log=false --log-level error --watch=false \
    --proxy-listen "127.0.0.1:${PORT[$1]} ssl http2" --ssl-cert "$WORK/cert.pem" --ssl-cert-key "$WORK/key.pem" >/dev/null &
  PIDS+=($!)
}
start_sluice sluice "$SLUICE"
if [ -n "${SLUICE_NETHTTP:-}" ]; then start_sluice sluice-nh "$SLUICE_NETHTTP"; SERVERS+=(sluice-nh); fi

for s in "${SERVERS[@]}"; do
  for i in $(seq 1 200); do
    curl -sk -o /dev/null --max-time 0.5 "https://127.0.0.1:${PORT[$s]}/" && break
    sleep 0.1
  done
  wrk -t1 -c4 -d1s "https://127.0.0.1:${PORT[$s]}/" >/dev/null
  h2load -c4 -m4 -D 1 "https://127.0.0.1:${PORT[$s]}/" >/dev/null
done

secs=${DURATION%s}
declare -A RES
for r in $(seq 1 "$ROUNDS"); do
  for load in h1 h2; do
    for s in "${SERVERS[@]}"; do
      url="https://127.0.0.1:${PORT[$s]}/"
      if [ $load = h1 ]; then
        rps=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" "$url" | awk '/Requests\/sec/ {print int($2)}')
      else
        rps=$(h2load -t"$THREADS" -c"$CONNS" -m"$STREAMS" -D "$secs" "$url" | awk '/^finished in/ {gsub(",","",$4); print int($4)}')
      fi
      echo "round $r $load $s: $rps req/s"
      RES[$load.$s]="${RES[$load.$s]:-} $rps"
    done
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "== medians over $ROUNDS rounds (req/s) and ratio to nginx"
for load in h1 h2; do
  base=$(echo "${RES[$load.nginx]}" | median)
  for s in "${SERVERS[@]}"; do
    m=$(echo "${RES[$load.$s]}" | median)
    printf '%-3s %-10s %8s  %.2fx\n' "$load" "$s" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN {print a/b}')"
  done
done
