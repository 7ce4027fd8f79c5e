package policy

import (
	"strconv"
	"sync"
	"testing"
)

func TestDecimalMatchesStrconv(t *testing.T) {
	for n := range int64(decimalCached) {
		if got, want := decimal(n), strconv.FormatInt(n, 10); got != want {
			t.Fatalf("decimal(%d) = %q, want %q", n, got, want)
		}
	}
}

// Goroutines racing to build the same chunk all get its numbers right;
// run with -race.
func TestDecimalConcurrentFirstUse(t *testing.T) {
	const first = decimalCached - chunkLen
	decimalChunks[first>>chunkBits].Store(nil) // unbuilt again (harmless: any caller rebuilds it)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for j := range int64(chunkLen) {
				n := first + (j+int64(g)*31)%chunkLen
				if got, want := decimal(n), strconv.FormatInt(n, 10); got != want {
					t.Errorf("decimal(%d) = %q, want %q", n, got, want)
				}
			}
		})
	}
	wg.Wait()
}

func TestHeaderValuesBeyondTheCache(t *testing.T) {
	hp := newHeaderPlan([]string{"day"}, []string{"Day"}, []int64{5_000_000}, []int64{86400})
	v := headerValues{remaining: []int64{4_999_999}, reset: 86400}
	hs := hp.build(&v, nil)
	want := []Header{
		{"X-RateLimit-Limit-Day", "5000000"}, {"X-RateLimit-Remaining-Day", "4999999"},
		{"RateLimit-Limit", "5000000"}, {"RateLimit-Remaining", "4999999"}, {"RateLimit-Reset", "86400"},
	}
	if len(hs) != len(want) {
		t.Fatalf("headers %v, want %v", hs, want)
	}
	for i := range want {
		if hs[i] != want[i] {
			t.Errorf("header %d = %v, want %v", i, hs[i], want[i])
		}
	}
}
