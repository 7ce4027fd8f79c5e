package bench

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
)

// IPKey returns the i-th key of every key set: an IPv4 address in
// 10.0.0.0/8 written in dotted decimal, the shape of a per-client-IP key.
// Distinct i below 1<<24 give distinct keys. The result is a new string
// each call, so a store that retains it is charged for its bytes.
func IPKey(i int) string {
	var b [16]byte
	s := strconv.AppendInt(b[:0], 10, 10)
	for shift := 16; shift >= 0; shift -= 8 {
		s = append(s, '.')
		s = strconv.AppendInt(s, int64(i>>shift&0xff), 10)
	}
	return string(s)
}

// A KeySet is a fixed list of distinct keys that benchmarks draw from
// uniformly at random, with a record of which keys were drawn.
//
// Draws go through a Cursor, one per goroutine; Cursors are merged back
// with Done. A KeySet is safe for concurrent use through its Cursors.
type KeySet struct {
	keys []string

	mu   sync.Mutex
	seen []uint64 // union of the Cursors' bitmaps
	seed atomic.Uint64
}

// NewKeySet returns n distinct keys (IPKey(0) to IPKey(n-1)). It returns an
// error when n is not between 1 and 1<<24.
func NewKeySet(n int) (*KeySet, error) {
	if n < 1 || n > 1<<24 {
		return nil, fmt.Errorf("bench: key set size must be in [1, %d], got %d", 1<<24, n)
	}
	ks := &KeySet{keys: make([]string, n), seen: make([]uint64, (n+63)/64)}
	uniq := make(map[string]struct{}, n)
	for i := range ks.keys {
		k := IPKey(i)
		if _, dup := uniq[k]; dup || k == "" {
			return nil, fmt.Errorf("bench: key %d (%q) is empty or repeated", i, k)
		}
		uniq[k] = struct{}{}
		ks.keys[i] = k
	}
	return ks, nil
}

// Len returns the number of keys in the set.
func (ks *KeySet) Len() int { return len(ks.keys) }

// Key returns the i-th key.
func (ks *KeySet) Key(i int) string { return ks.keys[i] }

// Reset forgets which keys were drawn.
func (ks *KeySet) Reset() {
	ks.mu.Lock()
	clear(ks.seen)
	ks.mu.Unlock()
}

// Cursor returns a new random stream over the keys, seeded differently
// from every other Cursor of ks.
func (ks *KeySet) Cursor() *Cursor {
	// Seeds are scrambled so that Cursors start far apart on the
	// generator's cycle: seeding with consecutive multiples of its
	// increment would make each Cursor replay its neighbour's draws.
	return &Cursor{
		ks:    ks,
		state: mix64(ks.seed.Add(1)),
		seen:  make([]uint64, len(ks.seen)),
	}
}

// Distinct returns how many distinct keys the merged Cursors drew.
func (ks *KeySet) Distinct() int {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	n := 0
	for _, w := range ks.seen {
		n += bits.OnesCount64(w)
	}
	return n
}

// CheckCoverage reports an error when the merged Cursors drew noticeably
// fewer distinct keys than draws uniform draws over the set should give:
// the check that a benchmark really spread its calls over the keys it
// claims. The expected count is n(1 - e^(-draws/n)); 90% of it passes.
func (ks *KeySet) CheckCoverage(draws int) error {
	n := float64(len(ks.keys))
	want := n * (1 - math.Exp(-float64(draws)/n))
	got := ks.Distinct()
	if float64(got) < 0.9*want || got > draws || got > len(ks.keys) {
		return fmt.Errorf("bench: %d draws over %d keys hit %d distinct keys, want about %.0f", draws, len(ks.keys), got, want)
	}
	return nil
}

// A Cursor draws keys from its KeySet. It is not safe for concurrent use:
// each goroutine takes its own.
type Cursor struct {
	ks    *KeySet
	state uint64
	seen  []uint64
}

// Next returns a key drawn uniformly at random and records it.
func (c *Cursor) Next() string { return c.ks.keys[c.NextIndex()] }

// NextIndex is Next for callers that keep their own per-key data: it
// returns the drawn key's index in the set and records it.
func (c *Cursor) NextIndex() int {
	// splitmix64: cheap, and good enough to spread draws uniformly.
	c.state += 0x9e3779b97f4a7c15
	i, _ := bits.Mul64(mix64(c.state), uint64(len(c.ks.keys)))
	c.seen[i>>6] |= 1 << (i & 63)
	return int(i)
}

// Done merges the keys c drew into its KeySet.
func (c *Cursor) Done() {
	c.ks.mu.Lock()
	for i, w := range c.seen {
		c.ks.seen[i] |= w
	}
	c.ks.mu.Unlock()
}

// mix64 is splitmix64's output function.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
