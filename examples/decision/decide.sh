#!/usr/bin/env sh
# Asks a running sluice-decision over HTTP, as a gateway without gRPC would.
# 200 means OK, 429 over limit; the body is the RateLimitResponse as JSON.
set -eu
curl -sS -w '\nHTTP %{http_code}\n' -X POST "${SLUICE_DECISION:-http://127.0.0.1:8080}/v1/decide" \
  -H 'content-type: application/json' \
  -d '{"domain": "edge", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}, {"key": "path", "value": "/login"}]}]}'
