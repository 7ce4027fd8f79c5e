package memorystore

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/seed-008287da/sluice/ratelimit"
)

// unreachable is a limit no benchmark reaches, so every call does the full
// work of an allowed decision.
var unreachable = []ratelimit.Limit{ratelimit.PerSecond(1 << 40)}

func userKey(i int) string { return "user:" + strconv.Itoa(i) }

// BenchmarkTake measures parallel decisions on existing keys, drawn at
// random from a set of 1, 100,000 or 1,000,000 keys, with Now left zero
// (the store reads the clock, as x/time/rate's Allow does). Each run checks
// that the store really holds that many keys before and after.
func BenchmarkTake(b *testing.B) {
	for _, n := range []int{1, 100_000, 1_000_000} {
		name := "Keys" + strconv.Itoa(n)
		if n == 1 {
			name = "HotKey"
		}
		b.Run(name, func(b *testing.B) { benchTake(b, n) })
	}
}

func benchTake(b *testing.B, n int) {
	s := New(Options{MaxKeys: 2 * n, SweepInterval: -1})
	defer s.Close()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = userKey(i)
		if _, err := s.Take(ctx, ratelimit.Request{Key: keys[i], Limits: unreachable}); err != nil {
			b.Fatal(err)
		}
	}
	if got := s.Len(); got != n {
		b.Fatalf("store holds %d keys before the run, want %d", got, n)
	}
	var seeds atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seeds.Add(1), 42))
		for pb.Next() {
			d, err := s.Take(ctx, ratelimit.Request{Key: keys[rng.IntN(n)], Limits: unreachable})
			if err != nil || !d.Allowed {
				b.Errorf("Take: allowed %v, %v", d.Allowed, err)
				return
			}
		}
	})
	b.StopTimer()
	if got := s.Len(); got != n {
		b.Fatalf("store holds %d keys after the run, want %d", got, n)
	}
	b.ReportMetric(float64(n), "keys")
}

// TestMemoryPerIdleKey holds the store to its memory target: at 1,000,000
// idle keys of one counter each, at most 128 bytes of heap in use per key.
// (At a million the shards' tables are under half full; the worst point,
// just after they doubled, is 3/8 full: 48/0.375 = 128 bytes.) Keys are
// built on the fly, so that whatever the store keeps of them is all that
// stays reachable.
func TestMemoryPerIdleKey(t *testing.T) {
	const n = 1_000_000
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	s := New(Options{MaxKeys: 2 * n, SweepInterval: -1})
	defer s.Close()
	var buf []byte
	for i := range n {
		buf = strconv.AppendInt(append(buf[:0], "user:"...), int64(i), 10)
		if _, err := s.Take(ctx, ratelimit.Request{Key: string(buf), Limits: unreachable}); err != nil {
			t.Fatal(err)
		}
	}
	after := heap()
	if got := s.Len(); got != n {
		t.Fatalf("store holds %d keys, want %d", got, n)
	}
	perKey := float64(after-before) / n
	t.Logf("%.1f bytes of heap per idle key at %d keys", perKey, n)
	if perKey > 128 {
		t.Errorf("%.1f bytes per idle key, want at most 128", perKey)
	}
	runtime.KeepAlive(s)
}
