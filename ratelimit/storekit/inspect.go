package storekit

import (
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// States converts the counters of limits (in the same order) into what
// ratelimit.Inspector.Inspect reports as of now: each window counter
// rolled to the window holding now, a token bucket's TAT as a time (zero
// when the bucket is full).
func States(limits []ratelimit.Limit, cs []Counter, now time.Time) []ratelimit.CounterState {
	nowMs := floorDiv(now.UnixNano(), int64(time.Millisecond))
	nowUs := floorDiv(now.UnixNano(), int64(time.Microsecond))
	out := make([]ratelimit.CounterState, len(limits))
	for i := range limits {
		l := &limits[i]
		c := cs[i]
		out[i].Limit = *l
		if l.Algorithm == ratelimit.TokenBucket {
			if c.Start > nowUs {
				out[i].Start = time.UnixMicro(c.Start)
			}
			continue
		}
		roll(&c, l, nowMs)
		out[i].Start = time.UnixMilli(c.Start)
		out[i].Current, out[i].Previous = c.Cur, c.Prev
	}
	return out
}
