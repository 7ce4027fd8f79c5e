// Package bench compares sluice with peer rate limiters on the same machine,
// in the same run and with the same key distributions.
//
// It is a module of its own so that the peers (golang.org/x/time/rate,
// sethvargo/go-limiter, ulule/limiter, throttled, go-redis/redis_rate) never
// enter sluice's go.mod. Nothing here is imported by sluice.
//
// Each part has a script that prints the exact commands it runs and
// the machine it runs on:
//
//   - run-sdk.sh: in-process limiters (BenchmarkHotKey, BenchmarkKeys) and
//     the bytes each idle key costs (cmd/keymem).
//   - run-redis.sh: Redis-backed limiters against one redis-server started
//     by the benchmark (BenchmarkRedis), with Redis commands and socket reads
//     per decision taken from INFO deltas.
//   - gateway.sh: wrk against nginx and the sluice gateway.
//   - run-decision.sh: sluice-decision against envoyproxy/ratelimit and a
//     bare grpc-go server (cmd/rlsbare) over gRPC, with the closed-loop
//     load generator cmd/rlsload. The peer is built from its own Go module,
//     peers/envoyratelimit, whose dependency versions clash with sluice's.
//
// Every benchmark checks its own setup: the number of distinct keys it
// really used is counted and compared with the number it claims, and a
// single denied call fails the run, because the limits are meant never to
// be reached.
package bench
