package bench

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// allRedisContenders is the Redis peers followed by sluice's Redis modes.
func allRedisContenders() []RedisContender {
	return append(RedisContenders(), SluiceRedisContenders()...)
}

// redisKeys is the number of distinct keys the Redis benchmarks spread
// their calls over.
const redisKeys = 10_000

// TestRedisContendersCountPerKey checks each Redis adapter against a real
// server: two calls per hour per key pass, the third is denied, another key
// starts from zero.
func TestRedisContendersCountPerKey(t *testing.T) {
	addr := startRedis(t)
	for _, c := range allRedisContenders() {
		t.Run(c.Name, func(t *testing.T) {
			inst, err := c.New(addr, 1, 2, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			ctx := context.Background()
			key := "count-" + c.Name
			for i, want := range []bool{true, true, false} {
				ok, err := inst.Allow(ctx, key)
				if err != nil || ok != want {
					t.Fatalf("call %d: allowed %v, error %v; want allowed %v", i+1, ok, err, want)
				}
			}
			if ok, err := inst.Allow(ctx, key+"-other"); err != nil || !ok {
				t.Fatalf("first call on another key: allowed %v, error %v", ok, err)
			}
		})
	}
}

// BenchmarkRedis runs closed-loop callers (each issues its next call when
// the previous one returns) against one redis-server, over 10k keys, with
// a limit never reached. Besides ns/op it reports decisions/s, the p50 and
// p99 latency of one call, and the Redis commands and socket reads per
// decision from INFO deltas: cmds/op counts every command the server ran,
// those inside Lua scripts included (server work); scripts/op the script
// calls; reads/op the read events on client sockets, one per batch of
// pipelined commands from one connection (the round trips).
func BenchmarkRedis(b *testing.B) {
	addr := startRedis(b)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ks, err := NewKeySet(redisKeys)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range allRedisContenders() {
		b.Run(c.Name, func(b *testing.B) {
			for _, callers := range []int{1, 16, 64, 256} {
				inst, err := c.New(addr, callers, Never, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
					runClosedLoop(b, admin, inst, ks, callers)
				})
				inst.Close()
			}
		})
	}
}

// runClosedLoop shares b.N calls among callers goroutines.
func runClosedLoop(b *testing.B, admin *redis.Client, inst RedisInstance, ks *KeySet, callers int) {
	ctx := context.Background()
	ks.Reset()
	cursors := make([]*Cursor, callers)
	lat := make([][]time.Duration, callers)
	for i := range cursors {
		cursors[i] = ks.Cursor()
		lat[i] = make([]time.Duration, 0, b.N/callers+1)
	}
	before, err := ReadRedisCounters(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	var left, denied, failed atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range callers {
		wg.Go(func() {
			c, l := cursors[i], lat[i]
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				ok, err := inst.Allow(ctx, c.Next())
				l = append(l, time.Since(t0))
				if err != nil {
					failed.Add(1)
				} else if !ok {
					denied.Add(1)
				}
			}
			lat[i] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	after, err := ReadRedisCounters(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cursors {
		c.Done()
	}
	if f, d := failed.Load(), denied.Load(); f > 0 || d > 0 {
		b.Fatalf("%d calls failed and %d were denied; the limit must never be reached", f, d)
	}
	if err := ks.CheckCoverage(b.N); err != nil {
		b.Fatal(err)
	}
	if inst.Check != nil {
		if err := inst.Check(); err != nil {
			b.Fatal(err)
		}
	}
	if inst.Metrics != nil {
		for unit, v := range inst.Metrics() {
			b.ReportMetric(v, unit)
		}
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all[len(all)/2])/1e3, "p50-us")
	b.ReportMetric(float64(all[len(all)*99/100])/1e3, "p99-us")
	// The first INFO's own read is counted in the second snapshot.
	b.ReportMetric(float64(after.Calls-before.Calls)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(after.Scripts-before.Scripts)/float64(b.N), "scripts/op")
	b.ReportMetric(float64(after.Reads-before.Reads-1)/float64(b.N), "reads/op")
	b.ReportMetric(float64(ks.Distinct()), "keys")
}
