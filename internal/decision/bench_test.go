package decision

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// benchKeys is the number of distinct descriptor values the benchmark
// cycles through; limits are never reached.
const benchKeys = 10_000

const benchConfig = `
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// closedLoop runs b.N calls from callers goroutines, each calling again as
// soon as its previous call returns (closed loop, as the peer figures were
// measured), over one gRPC connection per 16 callers. It reports calls/s.
func closedLoop(b *testing.B, target string, callers int, call func(ctx context.Context, conn *grpc.ClientConn, i int) error) {
	b.Helper()
	conns := make([]*grpc.ClientConn, (callers+15)/16)
	for i := range conns {
		conns[i] = dial(b, target)
		defer conns[i].Close()
		if err := call(context.Background(), conns[i], 0); err != nil { // connect outside the timing
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := conns[c%len(conns)]
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := call(context.Background(), conn, int(i)); err != nil {
					failed.Store(&err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	// CPU time of this process (client and server; not redis-server) per
	// call: steadier than throughput on a machine shared with other work.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime returns the user and system CPU time used by the process so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rlsCall(b *testing.B) func(ctx context.Context, conn *grpc.ClientConn, i int) error {
	reqs := make([]*rlspb.RateLimitRequest, benchKeys)
	for i := range reqs {
		reqs[i] = request("bench", desc("client", "c"+strconv.Itoa(i)))
	}
	return func(ctx context.Context, conn *grpc.ClientConn, i int) error {
		resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, reqs[i%benchKeys])
		if err == nil && resp.OverallCode != OK {
			err = fmt.Errorf("call %d: %s", i, resp.OverallCode)
		}
		return err
	}
}

// BenchmarkShouldRateLimit measures ShouldRateLimit through a real gRPC
// connection on loopback, one descriptor per call over 10 000 keys, with
// the memory store and with a real redis-server (synchronous: one Lua call
// per decision). BenchmarkHealthCheck is the bar: a bare grpc-go call on
// the same server.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, store := range []string{"memory", "redis"} {
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("store=%s/callers=%d", store, callers), func(b *testing.B) {
				var s *Service
				var keys func() int
				switch store {
				case "memory":
					st := memorystore.New(memorystore.Options{})
					defer st.Close()
					s = mustNew(b, benchConfig, st, Options{})
					keys = st.Len
				case "redis":
					r := testservers.Redis(b, testservers.RedisOptions{})
					var err error
					// A generous timeout: a decision that falls back to local
					// counters would not measure Redis.
					s, err = Open(mustParse(b, fmt.Sprintf("store: {type: redis, redis: {host: %s, port: %d, timeout: 5s}}\n%s", r.Host(), r.Port(), benchConfig)), Options{})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					keys = func() int {
						if st := s.store.(*redisstore.Store).Stats(); st.LocalDecisions > 0 {
							b.Fatalf("%d decisions fell back to local counters", st.LocalDecisions)
						}
						n, _ := r.Do(b, "DBSIZE").(int64)
						return int(n)
					}
				}
				_, conn := serveGRPC(b, s)
				closedLoop(b, conn.Target(), callers, rlsCall(b))
				// The benchmark must really have spread over its keys.
				if want := min(b.N, benchKeys); keys() < want {
					b.Fatalf("%d keys counted, want at least %d", keys(), want)
				}
			})
		}
	}
}

func BenchmarkHealthCheck(b *testing.B) {
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			_, conn := serveGRPC(b, newService(b, benchConfig, Options{}))
			req := &healthpb.HealthCheckRequest{}
			closedLoop(b, conn.Target(), callers, func(ctx context.Context, conn *grpc.ClientConn, _ int) error {
				_, err := healthpb.NewHealthClient(conn).Check(ctx, req)
				return err
			})
		})
	}
}

const benchConfig2 = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// BenchmarkDecide measures ShouldRateLimit called in process (no gRPC),
// with one descriptor ([user]) or two ([user], [client]) per request over
// 10 000 users, as bench/run-decision.sh sends them, with the memory store
// and with a real redis-server (synchronous), from 8 goroutines per core.
func BenchmarkDecide(b *testing.B) {
	for _, store := range []string{"memory", "redis"} {
		for _, descs := range []int{1, 2} {
			b.Run(fmt.Sprintf("store=%s/desc=%d", store, descs), func(b *testing.B) {
				var s *Service
				var keys func() int
				switch store {
				case "memory":
					st := memorystore.New(memorystore.Options{})
					defer st.Close()
					s = mustNew(b, benchConfig2, st, Options{})
					keys = st.Len
				case "redis":
					r := testservers.Redis(b, testservers.RedisOptions{})
					var err error
					s, err = Open(mustParse(b, fmt.Sprintf("store: {type: redis, redis: {host: %s, port: %d, timeout: 5s}}\n%s", r.Host(), r.Port(), benchConfig2)), Options{})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					keys = func() int {
						if st := s.store.(*redisstore.Store).Stats(); st.LocalDecisions > 0 {
							b.Fatalf("%d decisions fell back to local counters", st.LocalDecisions)
						}
						n, _ := r.Do(b, "DBSIZE").(int64)
						return int(n)
					}
				}
				reqs := make([]*rlspb.RateLimitRequest, benchKeys)
				for i := range reqs {
					u := "u" + strconv.Itoa(i)
					if descs == 1 {
						reqs[i] = request("bench", desc("user", u))
					} else {
						reqs[i] = request("bench", desc("user", u), desc("client", "c"+strconv.Itoa(i%100)))
					}
				}
				ctx := context.Background()
				var next atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := next.Add(1)
						resp, err := s.ShouldRateLimit(ctx, reqs[i%benchKeys])
						if err != nil {
							b.Error(err)
							return
						}
						if resp.OverallCode != OK {
							b.Errorf("call %d: %s", i, resp.OverallCode)
							return
						}
					}
				})
				b.StopTimer()
				if want := min(b.N, benchKeys); keys() < want {
					b.Fatalf("%d keys counted, want at least %d", keys(), want)
				}
			})
		}
	}
}

// BenchmarkProtoCodec times what grpc-go's codec does per call for a
// two-descriptor request and its answer (docs/benchmarks.md, "A fourth
// run"): proto.Unmarshal of the request, proto.Marshal of the response.
func BenchmarkProtoCodec(b *testing.B) {
	req := request("bench", desc("user", "user-1234"), desc("client", "client-1234"))
	raw, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	st := func() *rlspb.RateLimitResponse_DescriptorStatus {
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK,
			CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1000000000, Unit: rlspb.RateLimitResponse_RateLimit_HOUR},
			LimitRemaining:     999999,
			DurationUntilReset: durationpb.New(3000 * time.Second)}
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{st(), st()}}
	b.Run("unmarshal-request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m rlspb.RateLimitRequest
			if err := proto.Unmarshal(raw, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal-response", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
