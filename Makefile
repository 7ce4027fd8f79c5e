# The two commands of README.md: `make run` and `make check`.
.PHONY: run check test bench bench-sdk bench-redis bench-gateway release

# Runs the sluice gateway on the quickstart example (README's first command):
# in memory, proxy on :8000, admin on 127.0.0.1:8001, and the built-in echo
# upstream the example's services point to on 127.0.0.1:9080; no other
# service needed.
run:
	go run ./cmd/sluice run -c examples/quickstart/kong.yml --echo 127.0.0.1:9080

# The whole test suite (installs redis, etcd, wrk and nginx
# when missing; tools come from tools/go.mod). CI runs exactly this.
check:
	./scripts/check

# Unit tests only, without installing anything.
test:
	go test -race ./...

bench: bench-sdk bench-redis bench-gateway

bench-sdk:
	./bench/run-sdk.sh

bench-redis:
	./bench/run-redis.sh

bench-gateway:
	./bench/gateway.sh

# Versioned tarballs of every binary (linux/amd64, linux/arm64)
# and SHA256SUMS in dist/: make release VERSION=v1.2.0
release:
	./scripts/release $(VERSION)
