package bench

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// allContenders is the peers followed by sluice's stores.
func allContenders() []Contender { return append(Contenders(), SluiceContenders()...) }

// TestContendersCountPerKey checks each adapter before its figures are
// trusted: two calls per hour per key pass, the third on the same key is
// denied, and another key starts from zero. A limiter that ignored its key
// (sethvargo's own peer benchmark used one empty key) fails here.
func TestContendersCountPerKey(t *testing.T) {
	for _, c := range allContenders() {
		t.Run(c.Name, func(t *testing.T) {
			inst, err := c.New(2, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if inst.Close != nil {
				defer inst.Close()
			}
			want := []bool{true, true, false}
			if c.Name == "harness" {
				want = []bool{true, true, true}
			}
			for i, w := range want {
				ok, err := inst.Allow("10.0.0.1")
				if err != nil || ok != w {
					t.Fatalf("call %d on key 1: allowed %v, error %v; want allowed %v", i+1, ok, err, w)
				}
			}
			if !c.Keyed {
				return
			}
			ok, err := inst.Allow("10.0.0.2")
			if err != nil || !ok {
				t.Fatalf("first call on key 2: allowed %v, error %v; want allowed", ok, err)
			}
			if n := inst.Keys(); n >= 0 && n != 2 {
				t.Fatalf("limiter holds %d keys, want 2", n)
			}
		})
	}
}

func TestKeySetCoverage(t *testing.T) {
	ks, err := NewKeySet(1000)
	if err != nil {
		t.Fatal(err)
	}
	c := ks.Cursor()
	for range 5000 {
		c.Next()
	}
	c.Done()
	if err := ks.CheckCoverage(5000); err != nil {
		t.Fatal(err)
	}
	// A benchmark that drew one key while claiming a thousand must fail.
	ks.Reset()
	c = ks.Cursor()
	c.seen[0] = 1
	c.Done()
	if err := ks.CheckCoverage(5000); err == nil {
		t.Fatal("one distinct key in 5000 draws over 1000 keys passed the coverage check")
	}
}

func TestIPKeyDistinct(t *testing.T) {
	if _, err := NewKeySet(1 << 20); err != nil {
		t.Fatal(err)
	}
	if got := IPKey(0x0a0b0c); got != "10.10.11.12" {
		t.Fatalf("IPKey(0x0a0b0c) = %q, want 10.10.11.12", got)
	}
}

// prepare builds c's limiter with a limit never reached and takes one call
// for every key, so that the timed loop sees existing keys only.
func prepare(b *testing.B, c Contender, ks *KeySet) Instance {
	b.Helper()
	inst, err := c.New(Never, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for i := range ks.Len() {
		if ok, err := inst.Allow(ks.Key(i)); err != nil || !ok {
			b.Fatalf("prefilling key %d: allowed %v, error %v", i, ok, err)
		}
	}
	if n := inst.Keys(); c.Keyed && n >= 0 && n != ks.Len() {
		b.Fatalf("%s holds %d keys after prefilling %d", c.Name, n, ks.Len())
	}
	return inst
}

// runParallel times inst.Allow over keys drawn uniformly from ks by
// GOMAXPROCS goroutines, then fails the benchmark if any call was denied
// or failed, or if fewer distinct keys were drawn than b.N draws over ks
// should give. It reports the distinct keys drawn as the "keys" metric.
func runParallel(b *testing.B, inst Instance, ks *KeySet) {
	ks.Reset()
	cursors := make([]*Cursor, runtime.GOMAXPROCS(0))
	for i := range cursors {
		cursors[i] = ks.Cursor()
	}
	var next, denied, failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := cursors[next.Add(1)-1]
		var d, f int64
		for pb.Next() {
			ok, err := inst.Allow(c.Next())
			if err != nil {
				f++
			} else if !ok {
				d++
			}
		}
		denied.Add(d)
		failed.Add(f)
	})
	b.StopTimer()
	for _, c := range cursors {
		c.Done()
	}
	if f, d := failed.Load(), denied.Load(); f > 0 || d > 0 {
		b.Fatalf("%d calls failed and %d were denied; the limit must never be reached", f, d)
	}
	if err := ks.CheckCoverage(b.N); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(ks.Distinct()), "keys")
}

// BenchmarkHotKey: every goroutine hits one key. Run with -cpu 1,2.
func BenchmarkHotKey(b *testing.B) {
	ks, err := NewKeySet(1)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range allContenders() {
		runContender(b, c, ks)
	}
}

// runContender runs c over ks as a sub-benchmark. The limiter is built and
// prefilled on the sub-benchmark's first call, so that a contender -bench
// leaves out costs nothing, and closed when the sub-benchmark is done.
func runContender(b *testing.B, c Contender, ks *KeySet) {
	var inst *Instance
	b.Run(c.Name, func(b *testing.B) {
		if inst == nil {
			i := prepare(b, c, ks)
			inst = &i
		}
		runParallel(b, *inst, ks)
	})
	if inst != nil && inst.Close != nil {
		inst.Close()
	}
}

// BenchmarkKeys: calls spread uniformly over 100k and 1M existing keys.
func BenchmarkKeys(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		ks, err := NewKeySet(n)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("keys="+strconv.Itoa(n/1000)+"k", func(b *testing.B) {
			for _, c := range allContenders() {
				if !c.Keyed {
					continue
				}
				runContender(b, c, ks)
				runtime.GC()
			}
		})
	}
}
