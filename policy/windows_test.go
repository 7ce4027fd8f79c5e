package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// maxWindow is the longest window ratelimit.Limit.Validate accepts.
const maxWindow = 100 * 365 * 24 * time.Hour

func TestWindowsPairsCountsWithWindows(t *testing.T) {
	ls, err := Windows(ratelimit.FixedWindow, []int64{10, 100}, []time.Duration{time.Second, time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want := []ratelimit.Limit{ratelimit.PerSecond(10).Fixed(), ratelimit.PerMinute(100).Fixed()}
	if !slices.Equal(ls, want) {
		t.Errorf("Windows = %v, want %v", ls, want)
	}
}

// Kong's own message, word for word, for lists of different lengths.
func TestWindowsMismatchedCountsGiveKongsMessage(t *testing.T) {
	for _, c := range []struct {
		counts  []int64
		windows []time.Duration
	}{
		{[]int64{1}, nil},
		{nil, []time.Duration{time.Second}},
		{[]int64{1, 2}, []time.Duration{time.Second}},
	} {
		_, err := Windows(ratelimit.SlidingWindow, c.counts, c.windows)
		if !errors.Is(err, ErrMismatchedWindows) || err.Error() != "You must provide the same number of windows and limits" {
			t.Errorf("Windows(%v, %v) error = %v", c.counts, c.windows, err)
		}
	}
}

func TestWindowNameIsKongs(t *testing.T) {
	for w, want := range map[time.Duration]string{
		time.Second: "second", time.Minute: "minute", time.Hour: "hour", 24 * time.Hour: "day",
		30 * 24 * time.Hour: "month", 365 * 24 * time.Hour: "year",
		30 * time.Second: "30", 2 * time.Hour: "7200", 1500 * time.Millisecond: "1500ms",
	} {
		if got := WindowName(w); got != want {
			t.Errorf("WindowName(%s) = %q, want %q", w, got, want)
		}
	}
}

// FuzzWindows: Windows accepts exactly the lists of equal length whose
// every pair makes a valid limit, and otherwise names the problem.
func FuzzWindows(f *testing.F) {
	f.Add(uint8(1), uint8(1), int64(10), int64(60_000))
	f.Add(uint8(2), uint8(1), int64(10), int64(60_000))
	f.Add(uint8(3), uint8(3), int64(0), int64(1000))
	f.Add(uint8(1), uint8(1), int64(5), int64(-1))
	f.Fuzz(func(t *testing.T, nc, nw uint8, count, windowMs int64) {
		nc, nw = nc%6, nw%6
		counts := slices.Repeat([]int64{count}, int(nc))
		w := time.Duration(windowMs) * time.Millisecond
		if windowMs != 0 && w/time.Millisecond != time.Duration(windowMs) {
			w = -1 // overflowed: still invalid, still must not panic
		}
		windows := slices.Repeat([]time.Duration{w}, int(nw))
		ls, err := Windows(ratelimit.FixedWindow, counts, windows)
		switch {
		case nc != nw:
			if err == nil || err.Error() != "You must provide the same number of windows and limits" {
				t.Fatalf("%d counts, %d windows: err = %v", nc, nw, err)
			}
		case nc > 0 && (count <= 0 || w <= 0 || w > maxWindow):
			if !errors.Is(err, ratelimit.ErrInvalidLimit) || !strings.HasPrefix(err.Error(), "limit 0: ") {
				t.Fatalf("count %d window %s: err = %v, want an ratelimit.ErrInvalidLimit naming limit 0", count, w, err)
			}
		default:
			if err != nil || len(ls) != int(nc) {
				t.Fatalf("count %d window %s: %v, %v", count, w, ls, err)
			}
			for _, l := range ls {
				if l.Validate() != nil || l.Count != count || l.Window != w {
					t.Fatalf("limit %+v from count %d window %s", l, count, w)
				}
			}
		}
	})
}
