package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
)

// BenchmarkTakeLone measures one caller in synchronous mode on a fresh
// client, and on a client that has just served 64 concurrent callers: a
// connection that has pipelined concurrent calls keeps serving them
// through rueidis' writer and reader goroutines, so the lone caller's
// round trip then includes two hand-offs (docs/benchmarks.md, Redis).
//
//	go test -run '^$' -bench BenchmarkTakeLone -benchtime 2s ./ratelimit/redisstore/
func BenchmarkTakeLone(b *testing.B) {
	srv := testservers.Redis(b, testservers.RedisOptions{})
	lim := []ratelimit.Limit{ratelimit.PerSecond(1_000_000_000)}
	for _, burst := range []bool{false, true} {
		name := "fresh"
		if burst {
			name = "after-burst"
		}
		b.Run(name, func(b *testing.B) {
			c, err := connect(Config{Host: srv.Host(), Port: srv.Port()})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s, err := New(c, Options{Namespace: "lone-" + name, Timeout: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			if _, err := s.Take(ctx, ratelimit.Request{Key: "warm", Limits: lim}); err != nil {
				b.Fatal(err)
			}
			if burst {
				var wg sync.WaitGroup
				for range 64 {
					wg.Go(func() {
						for j := range 200 {
							s.Take(ctx, ratelimit.Request{Key: benchKeyNames[j], Limits: lim})
						}
					})
				}
				wg.Wait()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				d, err := s.Take(ctx, ratelimit.Request{Key: benchKeyNames[i%benchKeys], Limits: lim})
				if err != nil || !d.Allowed {
					b.Fatalf("decision %d: allowed=%v, err=%v", i, d.Allowed, err)
				}
			}
			b.StopTimer()
			if st := s.Stats(); st.LocalDecisions > 0 {
				b.Fatalf("%d decisions fell back to local counters", st.LocalDecisions)
			}
		})
	}
}
