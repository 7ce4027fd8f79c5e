package memorystore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// Two limits checked together, the way Kong's rate-limiting-advanced
// checks its windows: 2 per second and 3 per minute.
func Example() {
	s := memorystore.New(memorystore.Options{})
	defer s.Close()

	limits := []ratelimit.Limit{ratelimit.PerSecond(2).Fixed(), ratelimit.PerMinute(3).Fixed()}
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, time.Second, time.Second} {
		d, err := s.Take(context.Background(), ratelimit.Request{Key: "user:42", Limits: limits, Now: start.Add(at)})
		if err != nil {
			fmt.Println(err)
			return
		}
		r := d.State(d.Reported())
		fmt.Printf("t=%s allowed=%v remaining=%d per %s retry-after=%s\n",
			at, d.Allowed, r.Remaining, r.Limit.Window, d.RetryAfter)
	}
	// Output:
	// t=0s allowed=true remaining=1 per 1s retry-after=0s
	// t=0s allowed=true remaining=0 per 1s retry-after=0s
	// t=0s allowed=false remaining=0 per 1s retry-after=1s
	// t=1s allowed=true remaining=0 per 1m0s retry-after=0s
	// t=1s allowed=false remaining=0 per 1m0s retry-after=59s
}
