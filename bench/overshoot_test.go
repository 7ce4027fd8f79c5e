package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// Overshoot set-up: 4 stores (4 gateway nodes) with 16 callers each call
// one key limited to 1000 per fixed 1 s window, for 4.5 s, either as fast
// as they can (hammer) or paced at twice the limit in total (paced2x).
const (
	overshootNodes    = 4
	overshootCallers  = 16
	overshootLimit    = 1000
	overshootDuration = 4500 * time.Millisecond
)

// BenchmarkRedisOvershoot measures how far above its limit a key gets when
// the limit is reached on purpose: exactly the limit in synchronous mode;
// in periodic mode, what the other nodes admit before a sync cycle tells
// each node about it (a sync period's worth of traffic, or each node's
// whole limit when they all hammer at once). It runs for a fixed time
// whatever b.N is (run it with -benchtime 1x) and reports, over the full
// windows of the run, the median and maximum admitted calls per window and
// the maximum overshoot in percent of the limit.
//
// The stores decide by Redis' clock, as in production. Each admitted call
// is put in the window the store says it counted it in: the end of that
// window is the call's return time plus the decision's Reset, rounded to
// the second (the reply's latency is far below half a second).
func BenchmarkRedisOvershoot(b *testing.B) {
	addr := startRedis(b)
	for _, mode := range []struct {
		name string
		sync time.Duration
	}{{"sluice-sync", 0}, {"sluice-sync0.1", 100 * time.Millisecond}} {
		for _, paced := range []bool{false, true} {
			name := mode.name + "/hammer"
			if paced {
				name = mode.name + "/paced2x"
			}
			b.Run(name, func(b *testing.B) {
				admitted, err := overshoot(addr, mode.sync, paced, b.Name())
				if err != nil {
					b.Fatal(err)
				}
				slices.Sort(admitted)
				med, hi := admitted[len(admitted)/2], admitted[len(admitted)-1]
				b.ReportMetric(float64(overshootLimit), "limit")
				b.ReportMetric(float64(med), "admitted/window")
				b.ReportMetric(float64(hi), "max-admitted/window")
				b.ReportMetric(100*float64(hi-overshootLimit)/overshootLimit, "overshoot-%")
				b.ReportMetric(float64(len(admitted)), "windows")
			})
		}
	}
}

// overshoot runs the nodes against Redis at addr and returns the admitted
// calls of every full window. Paced callers call at even intervals, all of
// them together at twice the limit.
func overshoot(addr string, syncRate time.Duration, paced bool, ns string) ([]int64, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, err
	}
	limits := []ratelimit.Limit{ratelimit.Every(overshootLimit, time.Second).Fixed()}
	stores := make([]*redisstore.Store, overshootNodes)
	for i := range stores {
		c, err := redisstore.NewClient(redisstore.Config{Host: host, Port: port})
		if err != nil {
			return nil, fmt.Errorf("dialling redis: %w", err)
		}
		defer c.Close()
		s, err := redisstore.New(c, redisstore.Options{Namespace: ns, SyncRate: syncRate, Timeout: sluiceRedisTimeout})
		if err != nil {
			return nil, err
		}
		defer s.Close()
		stores[i] = s
	}
	var (
		mu      sync.Mutex
		perWin  = map[int64]int64{}
		failed  atomic.Int64
		wg      sync.WaitGroup
		ctx     = context.Background()
		start   = time.Now()
		end     = start.Add(overshootDuration)
		firstW  = start.Unix() + 1 // first window that starts after start
		lastW   = end.Unix() - 1   // last window that ends before end
		perNode = overshootCallers
	)
	for _, s := range stores {
		for range perNode {
			wg.Go(func() {
				local := map[int64]int64{}
				var tick <-chan time.Time
				if paced {
					every := time.Second * overshootNodes * overshootCallers / (2 * overshootLimit)
					t := time.NewTicker(every)
					defer t.Stop()
					tick = t.C
				}
				for time.Now().Before(end) {
					if tick != nil {
						<-tick
					}
					d, err := s.Take(ctx, ratelimit.Request{Key: "hot", Limits: limits})
					if err != nil {
						failed.Add(1)
						continue
					}
					if d.Allowed {
						windowEnd := time.Now().Add(d.State(0).Reset).Round(time.Second)
						local[windowEnd.Unix()-1]++
					}
				}
				mu.Lock()
				for w, n := range local {
					perWin[w] += n
				}
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return nil, fmt.Errorf("%d calls failed", f)
	}
	for _, s := range stores {
		if st := s.Stats(); st.LocalDecisions > 0 {
			return nil, fmt.Errorf("%d decisions fell back to local counters", st.LocalDecisions)
		}
	}
	var out []int64
	for w := firstW; w <= lastW; w++ {
		out = append(out, perWin[w])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no full window in %s", overshootDuration)
	}
	return out, nil
}
