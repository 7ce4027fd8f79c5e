package ratelimit

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestInvalidLimitsNameTheProblem(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		want string
	}{
		{Limit{Count: 0, Window: time.Second}, "count must be greater than 0, got 0"},
		{Limit{Count: -5, Window: time.Second}, "count must be greater than 0, got -5"},
		{Limit{Count: 1}, "window must be greater than 0, got 0s"},
		{Limit{Count: 1, Window: -time.Second}, "window must be greater than 0, got -1s"},
		{Limit{Count: 1, Window: 1500 * time.Microsecond}, "window must be a whole number of milliseconds, got 1.5ms"},
		{Limit{Count: 1, Window: 101 * 365 * 24 * time.Hour}, "window must be at most"},
		{Limit{Algorithm: TokenBucket, Count: 1, Window: time.Second, Burst: -1}, "burst must not be negative, got -1"},
		{Limit{Algorithm: 7, Count: 1, Window: time.Second}, "unknown algorithm 7"},
		{PerSecond(10_000_000).TokenBucket(1), "count of a token bucket must be at most 1000000 per 1s (one per microsecond), got 10000000"},
	} {
		err := c.l.Validate()
		if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Validate() = %v, want an ErrInvalidLimit saying %q", c.l, err, c.want)
		}
	}
	err := ValidateLimits([]Limit{PerSecond(1), {Count: 1}})
	if !errors.Is(err, ErrInvalidLimit) || !strings.HasPrefix(err.Error(), "limit 1: ") {
		t.Errorf("ValidateLimits with a bad second limit: %v, want it to name limit 1", err)
	}
	if err := ValidateLimits(nil); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("ValidateLimits(nil) = %v, want ErrInvalidLimit", err)
	}
}

func TestParseAlgorithmInvertsString(t *testing.T) {
	for _, a := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		if got, err := ParseAlgorithm(a.String()); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAlgorithm("leaky"); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("ParseAlgorithm(leaky) = %v, want ErrInvalidLimit", err)
	}
}

// FuzzLimitValidate: Validate never panics, accepts exactly the documented
// limits, and a valid limit's Capacity is positive.
func FuzzLimitValidate(f *testing.F) {
	f.Add(uint8(0), int64(10), int64(time.Minute), int64(0))
	f.Add(uint8(2), int64(10), int64(time.Second), int64(20))
	f.Add(uint8(9), int64(-1), int64(1), int64(-1))
	f.Add(uint8(2), int64(1_000_001), int64(time.Second), int64(1))
	f.Fuzz(func(t *testing.T, alg uint8, count, window, burst int64) {
		l := Limit{Algorithm: Algorithm(alg), Count: count, Window: time.Duration(window), Burst: burst}
		err := l.Validate()
		valid := alg <= uint8(TokenBucket) && count > 0 && window > 0 &&
			window%int64(time.Millisecond) == 0 && time.Duration(window) <= maxWindow && burst >= 0 &&
			(Algorithm(alg) != TokenBucket || count <= window/int64(time.Microsecond))
		if (err == nil) != valid {
			t.Fatalf("%+v: Validate() = %v, want valid = %v", l, err, valid)
		}
		if err != nil && !errors.Is(err, ErrInvalidLimit) {
			t.Fatalf("%+v: error %v does not wrap ErrInvalidLimit", l, err)
		}
		if valid && l.Capacity() <= 0 {
			t.Fatalf("%+v: Capacity() = %d", l, l.Capacity())
		}
		_ = l.String()
	})
}

// parseKey inverts Key, proving that it loses nothing.
func parseKey(k string) ([]string, bool) {
	var parts []string
	for k != "" {
		i := strings.IndexByte(k, ':')
		if i < 0 {
			return nil, false
		}
		n, err := strconv.Atoi(k[:i])
		if err != nil || n < 0 || n > len(k)-i-1 {
			return nil, false
		}
		parts = append(parts, k[i+1:i+1+n])
		k = k[i+1+n:]
	}
	return parts, true
}

// FuzzKey: distinct lists of parts give distinct keys. The fuzzer's two
// strings are cut into parts at every 0xFF byte.
func FuzzKey(f *testing.F) {
	f.Add("a:b\xffc", "a\xffb:c")
	f.Add("3:abc", "\xff3:abc")
	f.Add("", "\xff")
	f.Add("acme\xff/api", "acme/\xffapi")
	f.Fuzz(func(t *testing.T, a, b string) {
		p, q := strings.Split(a, "\xff"), strings.Split(b, "\xff")
		if slices.Equal(p, q) != (Key(p...) == Key(q...)) {
			t.Fatalf("Key(%q) = %q, Key(%q) = %q", p, Key(p...), q, Key(q...))
		}
		if got, ok := parseKey(Key(p...)); !ok || !slices.Equal(got, p) {
			t.Fatalf("Key(%q) = %q parses back as %q", p, Key(p...), got)
		}
	})
}

func TestKeyOfNoPartsIsEmpty(t *testing.T) {
	if k := Key(); k != "" {
		t.Errorf("Key() = %q", k)
	}
	if Key("") == Key() || Key("", "") == Key("") {
		t.Error("empty parts must still count as parts")
	}
}

// The limit a single set of headers describes is the one with the least
// remaining; among equals, the longest window.
func TestDecisionReported(t *testing.T) {
	st := func(w time.Duration, remaining int64) LimitState {
		return LimitState{Limit: Limit{Count: 100, Window: w}, Remaining: remaining}
	}
	for _, c := range []struct {
		name   string
		states []LimitState
		want   int
	}{
		{"empty", nil, -1},
		{"one", []LimitState{st(time.Second, 5)}, 0},
		{"smallest remaining", []LimitState{st(time.Second, 5), st(time.Minute, 3), st(time.Hour, 9)}, 1},
		{"tie goes to the larger window", []LimitState{st(time.Hour, 3), st(time.Second, 3), st(time.Minute, 3)}, 0},
		{"tie, larger window last", []LimitState{st(time.Second, 0), st(time.Minute, 0), st(time.Hour, 0)}, 2},
		{"beyond the inline states", []LimitState{
			st(time.Second, 9), st(time.Second, 9), st(time.Second, 9), st(time.Second, 9),
			st(time.Second, 9), st(time.Minute, 2), st(time.Hour, 7)}, 5},
	} {
		var d Decision
		for i, s := range c.states {
			d.grow(i + 1)
			*d.statePtr(i) = s
		}
		if got := d.Reported(); got != c.want {
			t.Errorf("%s: Reported() = %d, want %d", c.name, got, c.want)
		}
		if d.Len() != len(c.states) || !slices.Equal(d.States(), c.states) {
			t.Errorf("%s: States() = %v, want %v", c.name, d.States(), c.states)
		}
	}
}

// grow makes d hold n states, keeping those it has.
func (d *Decision) grow(n int) {
	if n <= d.n {
		return
	}
	d.n = n
	if extra := n - inlineStates - len(d.more); extra > 0 {
		d.more = append(d.more, make([]LimitState, extra)...)
	}
}
