package policy

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Heavy hitters. Every rate-limiting instance counts the identifiers it
// decides in a space-saving sketch (Metwally, Agrawal and El Abbadi,
// "Efficient computation of frequent and top-k elements in data
// streams", 2005): at most K identifiers are tracked; a new identifier
// when K are tracked replaces the one with the fewest requests and
// inherits its count, which is then an overestimate by at most that
// count (Error). Any identifier with more than 1/K of the requests is
// always tracked, so the heaviest ones are never missed. Denials are
// counted beside requests, and an identifier denied often is requested
// often, so it is tracked too. Every denial is recorded; allowed
// decisions are sampled, one in 16 recorded with a weight of 16, so the
// cost of the usual request stays a random number (docs/benchmarks.md).
//
// The last minute is six buckets of ten seconds: a top list sums the
// current bucket and the five before it. Memory is fixed by K
// (RegistryOptions.TopKeys), never by traffic: six buckets of K entries
// per instance.

// topBuckets and topBucketLen make the window a top list covers.
const (
	topBuckets   = 6
	topBucketLen = 10 * time.Second
	// DefaultTopKeys is the default RegistryOptions.TopKeys.
	DefaultTopKeys = 128
	// topSample is how many allowed decisions one recorded allowed decision
	// stands for: 1 in topSample is recorded, with that weight, so that the
	// usual, allowed request pays a random number and nothing else.
	// Denials are all recorded.
	topSample = 16
)

// A TopEntry is one identifier of a top list.
type TopEntry struct {
	// Identifier is the counter key, as Inspect and Reset take it.
	Identifier string `json:"identifier"`
	// Requests and Denied are the decisions of the last minute: Denied
	// counts every denial, Requests adds the allowed decisions estimated
	// from a one-in-16 sample.
	Requests int64 `json:"requests"`
	Denied   int64 `json:"denied"`
	// Error bounds the sketch's overestimate: the true denials are at
	// least Denied-Error; Requests-Error bounds the estimate of
	// requests, which the sampling can put above or below the true count.
	Error int64 `json:"error"`
}

// TopKeys is a heavy-hitters sketch of the last minute: the sketch each
// rate-limiting instance keeps, for adapters that decide without a policy
// instance (the decision service keeps one per domain). Make it with
// NewTopKeys; a nil *TopKeys records nothing and lists nothing. It is safe
// for concurrent use.
type TopKeys struct {
	mu      sync.Mutex
	k       int
	sample  int64 // topSample; 1 in tests that count exactly
	buckets [topBuckets]topBucket
}

type topBucket struct {
	epoch int64 // Unix time / topBucketLen; 0 for an unused bucket
	idx   map[string]*topNode
	// heap is a min-heap by Requests over nodes, which holds the k
	// entries: a node knows its place, so moving it writes no map entry.
	heap  []*topNode
	nodes []topNode
}

// NewTopKeys returns a sketch tracking at most k identifiers per ten
// seconds (zero means DefaultTopKeys), or nil when k is negative.
func NewTopKeys(k int) *TopKeys {
	if k < 0 {
		return nil
	}
	if k == 0 {
		k = DefaultTopKeys
	}
	return &TopKeys{k: k, sample: topSample}
}

type topNode struct {
	TopEntry
	i int
}

// Record counts one decision for key at now, denied or not. The sketch
// keeps key as it is: a caller whose key aliases a buffer it reuses
// (an unsafe conversion) passes a copy.
func (t *TopKeys) Record(now time.Time, key string, denied bool) {
	if w, d, ok := t.weigh(denied); ok {
		t.record(now, key, w, d)
	}
}

// RecordFunc is Record for a key that costs something to build: key is
// called only when the decision is recorded (every denial, one allowed
// decision in 16).
func (t *TopKeys) RecordFunc(now time.Time, denied bool, key func() string) {
	if w, d, ok := t.weigh(denied); ok {
		t.record(now, key(), w, d)
	}
}

// weigh returns the requests and denials one decision adds, or false when
// the sample leaves it out.
func (t *TopKeys) weigh(denied bool) (w, d int64, ok bool) {
	if t == nil {
		return 0, 0, false
	}
	if denied {
		return 1, 1, true
	}
	if t.sample > 1 && rand.Uint64()%uint64(t.sample) != 0 {
		return 0, 0, false
	}
	return t.sample, 0, true
}

func (t *TopKeys) record(now time.Time, key string, w, d int64) {
	epoch := now.UnixNano() / int64(topBucketLen)
	t.mu.Lock()
	b := &t.buckets[epoch%topBuckets]
	if b.epoch != epoch {
		b.epoch = epoch
		if b.idx == nil {
			b.idx = make(map[string]*topNode, t.k)
			b.nodes = make([]topNode, t.k)
			b.heap = make([]*topNode, 0, t.k)
		} else {
			clear(b.idx)
		}
		b.heap = b.heap[:0]
	}
	if n, ok := b.idx[key]; ok {
		n.Requests += w
		n.Denied += d
		b.down(n.i)
		t.mu.Unlock()
		return
	}
	if len(b.heap) < t.k {
		n := &b.nodes[len(b.heap)]
		*n = topNode{TopEntry{Identifier: key, Requests: w, Denied: d}, len(b.heap)}
		b.heap = append(b.heap, n)
		b.idx[key] = n
		b.up(n.i)
		t.mu.Unlock()
		return
	}
	n := b.heap[0]
	delete(b.idx, n.Identifier)
	n.TopEntry = TopEntry{Identifier: key, Requests: n.Requests + w, Denied: n.Denied + d, Error: n.Requests}
	b.idx[key] = n
	b.down(0)
	t.mu.Unlock()
}

func (b *topBucket) swap(i, j int) {
	b.heap[i], b.heap[j] = b.heap[j], b.heap[i]
	b.heap[i].i, b.heap[j].i = i, j
}

func (b *topBucket) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if b.heap[p].Requests <= b.heap[i].Requests {
			return
		}
		b.swap(i, p)
		i = p
	}
}

func (b *topBucket) down(i int) {
	n := len(b.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && b.heap[r].Requests < b.heap[l].Requests {
			m = r
		}
		if b.heap[i].Requests <= b.heap[m].Requests {
			return
		}
		b.swap(i, m)
		i = m
	}
}

// TopBy orders a top list.
type TopBy int

const (
	// TopByRequests orders by decisions, allowed or not.
	TopByRequests TopBy = iota
	// TopByDenied orders by denials; identifiers never denied are left out.
	TopByDenied
)

// Top returns the n heaviest identifiers of the minute before now.
func (t *TopKeys) Top(now time.Time, by TopBy, n int) []TopEntry {
	if t == nil || n <= 0 {
		return []TopEntry{}
	}
	epoch := now.UnixNano() / int64(topBucketLen)
	sum := map[string]*TopEntry{}
	t.mu.Lock()
	for i := range t.buckets {
		b := &t.buckets[i]
		if b.epoch == 0 || b.epoch > epoch || b.epoch <= epoch-topBuckets {
			continue
		}
		for _, e := range b.heap {
			s := sum[e.Identifier]
			if s == nil {
				s = &TopEntry{Identifier: e.Identifier}
				sum[e.Identifier] = s
			}
			s.Requests += e.Requests
			s.Denied += e.Denied
			s.Error += e.Error
		}
	}
	t.mu.Unlock()
	out := make([]TopEntry, 0, len(sum))
	for _, e := range sum {
		if by == TopByDenied && e.Denied == 0 {
			continue
		}
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b TopEntry) int {
		x, y := a.Requests, b.Requests
		if by == TopByDenied {
			x, y = a.Denied, b.Denied
		}
		if c := cmp.Compare(y, x); c != 0 {
			return c
		}
		return strings.Compare(a.Identifier, b.Identifier)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
