// Command rlsload is a closed-loop load generator for Envoy's rate limit
// service API (envoy.service.ratelimit.v3 ShouldRateLimit): callers that
// each send their next request when the previous one is answered, over a
// few shared gRPC connections, with descriptor values drawn uniformly from
// a set of distinct users so that limits are never reached.
//
// Usage:
//
//	rlsload -addr 127.0.0.1:8081 -callers 64 -descriptors 2 -duration 5s \
//	        -server-pid PID -redis 127.0.0.1:6379 -redis-pid PID -name decision/peer
//
// It prints one line in Go's benchmark format (benchtable and benchstat
// read it): decisions/s, p50 and p99 in µs, errors, the CPU time per
// decision of the server process, of redis-server and of rlsload itself
// (from /proc/PID/stat and getrusage), the Redis commands per decision
// (INFO commandstats) and the distinct users drawn. It exits 1, naming the
// first failure, when a call fails, an answer is not OK with one status
// per descriptor, or the draws did not cover the users.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/seed-008287da/sluice/bench"
)

func main() {
	os.Exit(run())
}

func run() int {
	var l bench.RLSLoad
	flag.StringVar(&l.Addr, "addr", "127.0.0.1:8081", "the service's gRPC address")
	flag.StringVar(&l.Domain, "domain", "bench", "the requests' domain")
	flag.IntVar(&l.Callers, "callers", 1, "closed-loop callers")
	flag.IntVar(&l.Conns, "conns", 4, "gRPC connections the callers share")
	flag.IntVar(&l.Users, "users", 10_000, "distinct descriptor values")
	flag.IntVar(&l.Descriptors, "descriptors", 1, "descriptors per request: 1 ([user]) or 2 ([user], [client])")
	flag.IntVar(&l.Requests, "requests", 0, "make exactly this many calls, all measured, instead of -warmup and -duration")
	flag.DurationVar(&l.Warmup, "warmup", time.Second, "unmeasured calls before the measurement")
	flag.DurationVar(&l.Duration, "duration", 5*time.Second, "the measurement")
	flag.IntVar(&l.ServerPID, "server-pid", 0, "measure this process's CPU time")
	flag.IntVar(&l.RedisPID, "redis-pid", 0, "measure this redis-server's CPU time")
	redisAddr := flag.String("redis", "", "count the commands this Redis (host:port) runs")
	wait := flag.Duration("wait", 0, "first wait up to this long for the service to answer OK")
	name := flag.String("name", "Decision", "the result line's name, after \"Benchmark\"")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *redisAddr != "" {
		l.Redis = redis.NewClient(&redis.Options{Addr: *redisAddr})
		defer l.Redis.Close()
	}
	if *wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, *wait)
		err := bench.WaitRLS(wctx, l.Addr, l.Domain)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			return 1
		}
	}
	r, err := l.Run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		return 1
	}
	fmt.Println(r.BenchLine(*name))
	if !r.OK() {
		fmt.Fprintf(os.Stderr, "rlsload: %s: %d of %d calls failed and %d were not OK (first: %s)", *name, r.Errors, r.Calls, r.Bad, r.FirstError)
		if r.Coverage != nil {
			fmt.Fprintf(os.Stderr, "; %v", r.Coverage)
		}
		fmt.Fprintln(os.Stderr)
		return 1
	}
	return 0
}
