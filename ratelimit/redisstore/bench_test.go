package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
)

// benchKeys is the number of distinct keys the callers cycle through, as
// in the peer comparison (bench/): 10k keys, limits never reached.
const benchKeys = 10_000

var benchKeyNames = func() []string {
	ks := make([]string, benchKeys)
	for i := range ks {
		ks[i] = "user:" + strconv.Itoa(i)
	}
	return ks
}()

// BenchmarkTake measures decisions per second with closed-loop callers
// (each waits for its decision before asking again) on a standalone
// redis-server started for the benchmark, in synchronous mode and with
// sync_rate 0.1 s. It reports decisions/s, Redis round trips per decision
// and checks that every key was used.
//
//	go test -run '^$' -bench BenchmarkTake -benchtime 100000x ./ratelimit/redisstore/
func BenchmarkTake(b *testing.B) {
	srv := testservers.Redis(b, testservers.RedisOptions{})
	c, err := connect(Config{Host: srv.Host(), Port: srv.Port()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	modes := []struct {
		name string
		opts Options
	}{
		{"sync", Options{}},
		{"sync_nobatch", Options{MaxBatch: 1}},
		{"sync_rate=0.1", Options{SyncRate: 100 * time.Millisecond}},
	}
	lim := []ratelimit.Limit{ratelimit.PerSecond(1_000_000_000)}
	for _, m := range modes {
		for _, callers := range []int{1, 16, 64, 256} {
			b.Run(m.name+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				o := m.opts
				o.Namespace = "bench-" + m.name + "-" + strconv.Itoa(callers)
				o.Timeout = 5 * time.Second
				s, err := New(c, o)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				var next, denied, failed atomic.Int64
				cpu0, self0 := redisCPU(b, srv), selfCPU(b)
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							d, err := s.Take(ctx, ratelimit.Request{Key: benchKeyNames[i%benchKeys], Limits: lim})
							if err != nil {
								failed.Add(1)
							} else if !d.Allowed {
								denied.Add(1)
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if failed.Load() > 0 || denied.Load() > 0 {
					b.Fatalf("%d errors, %d denials", failed.Load(), denied.Load())
				}
				st := s.Stats()
				if st.LocalDecisions > 0 {
					b.Fatalf("%d decisions fell back to local counters", st.LocalDecisions)
				}
				if want := min(b.N, benchKeys); st.Keys != want {
					b.Fatalf("%d keys used, want %d", st.Keys, want)
				}
				if testing.Verbose() {
					b.Log(srv.Do(b, "INFO", "commandstats"))
					srv.Do(b, "CONFIG", "RESETSTAT")
				}
				b.ReportMetric((redisCPU(b, srv)-cpu0)*1e6/float64(b.N), "redis-cpu-us/decision")
				b.ReportMetric((selfCPU(b)-self0)*1e6/float64(b.N), "client-cpu-us/decision")
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
				b.ReportMetric(float64(st.RedisCalls)/float64(b.N), "roundtrips/decision")
			})
		}
	}
}

// selfCPU returns the CPU seconds (user + system) this process has used:
// the client side of the decisions, plus the benchmark's own loop.
func selfCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// redisCPU returns the CPU seconds (user + system) the server has used, by
// its own INFO: a measure that other load on the machine does not skew
// the way it skews wall-clock throughput.
func redisCPU(b *testing.B, srv *testservers.RedisServer) float64 {
	info, _ := srv.Do(b, "INFO", "cpu").(string)
	var sum float64
	for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
		i := strings.Index(info, f)
		if i < 0 {
			b.Fatalf("INFO cpu without %s", f)
		}
		v := info[i+len(f):]
		if j := strings.IndexAny(v, "\r\n"); j >= 0 {
			v = v[:j]
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("INFO cpu %s%q: %v", f, v, err)
		}
		sum += x
	}
	return sum
}
