package ratelimit

import (
	"testing"
	"testing/synctest"
	"time"
)

// In a synctest bubble the clock reads exactly the bubble's time, before
// and after it reads the wall clock again.
func TestClockReadsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c clock
		for _, step := range []time.Duration{0, 0, time.Nanosecond, 300 * time.Millisecond, clockResync - 1, clockResync, 3 * clockResync, time.Hour} {
			time.Sleep(step)
			if got, want := c.now(), time.Now(); !got.Equal(want) {
				t.Fatalf("after a sleep of %s: clock read %s, time.Now %s", step, got, want)
			}
		}
	})
}

// Outside a bubble successive readings between two wall-clock reads go
// forward with the monotonic clock.
func TestClockAdvances(t *testing.T) {
	var c clock
	first := c.now()
	prev := first
	for range 1000 {
		got := c.now()
		if got.Before(prev) && got.Sub(first) < clockResync {
			t.Fatalf("clock went back from %s to %s", prev, got)
		}
		prev = got
	}
}
