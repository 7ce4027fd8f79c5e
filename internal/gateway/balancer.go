package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"hash/crc32"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// A balancer spreads the requests of one upstream over its targets with
// the upstream's algorithm, skipping unhealthy targets and those of
// weight 0. It lives as long as its configuration generation; so does
// the health of its targets. Safe for concurrent use.
type balancer struct {
	up      *kongconf.Upstream
	targets []*target // weight > 0, in configuration order
	// ring is consistent-hashing's continuum: points sorted by hash, each
	// naming a target.
	ring []ringPoint

	mu      sync.Mutex
	current []int // smooth weighted round-robin state, by target
	next    int   // tie breaking for least-connections and latency
}

type ringPoint struct {
	hash   uint32
	target int
}

// target is one target of a balancer and its health.
type target struct {
	t      *kongconf.Target
	addr   string
	weight int
	// active counts requests in flight (least-connections).
	active atomic.Int64
	// ewma is the smoothed upstream latency in nanoseconds (latency); 0
	// until the first response.
	ewma atomic.Int64

	healthy atomic.Bool
	hmu     sync.Mutex
	// consecutive outcomes, counted for active and passive checks apart
	counts [2]healthCounts
}

type healthCounts struct{ successes, tcpFailures, timeouts, httpFailures int }

const (
	byActive  = 0
	byPassive = 1
)

func newBalancer(up *kongconf.Upstream) *balancer {
	b := &balancer{up: up}
	for _, t := range up.Targets {
		if t.Weight == 0 || t.Host == "" {
			continue // disabled, as Kong's weight 0
		}
		tg := &target{t: t, addr: t.Addr(), weight: t.Weight}
		tg.healthy.Store(true)
		b.targets = append(b.targets, tg)
	}
	b.current = make([]int, len(b.targets))
	if up.Algorithm == "consistent-hashing" && len(b.targets) > 0 {
		b.ring = buildRing(b.targets, up.Slots)
	}
	return b
}

// buildRing places slots points on the continuum, each target's share
// proportional to its weight (at least one point each).
func buildRing(ts []*target, slots int) []ringPoint {
	total := 0
	for _, t := range ts {
		total += t.weight
	}
	var ring []ringPoint
	for i, t := range ts {
		n := max(1, slots*t.weight/total)
		for j := range n {
			h := crc32.ChecksumIEEE([]byte(t.addr + "#" + strconv.Itoa(j)))
			ring = append(ring, ringPoint{h, i})
		}
	}
	sort.Slice(ring, func(i, j int) bool {
		if ring[i].hash != ring[j].hash {
			return ring[i].hash < ring[j].hash
		}
		return ring[i].target < ring[j].target
	})
	return ring
}

// usable reports whether the upstream has targets to send to: some
// healthy, and at least healthchecks.threshold percent of the weight.
func (b *balancer) usable() bool {
	total, healthy := 0, 0
	for _, t := range b.targets {
		total += t.weight
		if t.healthy.Load() {
			healthy += t.weight
		}
	}
	if healthy == 0 {
		return false
	}
	return float64(healthy)*100 >= b.up.Healthchecks.Threshold*float64(total)
}

// pick returns the target for an attempt: healthy, not among tried when
// another one is left, chosen by the algorithm; nil when none is healthy.
// key is the consistent-hashing value ("" for none).
func (b *balancer) pick(key string, tried []*target) *target {
	if !b.usable() {
		return nil
	}
	avoid := func(t *target) bool {
		if !t.healthy.Load() {
			return false
		}
		for _, x := range tried {
			if x == t {
				return false
			}
		}
		return true
	}
	if len(tried) > 0 {
		if t := b.choose(key, avoid); t != nil {
			return t
		}
	}
	return b.choose(key, func(t *target) bool { return t.healthy.Load() })
}

func (b *balancer) choose(key string, ok func(*target) bool) *target {
	switch b.up.Algorithm {
	case "consistent-hashing":
		if key != "" {
			return b.hashed(key, ok)
		}
	case "least-connections":
		return b.least(ok, func(t *target) float64 { return float64(t.active.Load()+1) / float64(t.weight) })
	case "latency":
		return b.least(ok, func(t *target) float64 {
			return float64(t.ewma.Load()) * float64(t.active.Load()+1) / float64(t.weight)
		})
	}
	return b.roundRobin(ok)
}

// roundRobin is nginx's smooth weighted round-robin over the targets ok
// accepts.
func (b *balancer) roundRobin(ok func(*target) bool) *target {
	b.mu.Lock()
	defer b.mu.Unlock()
	best, total := -1, 0
	for i, t := range b.targets {
		if !ok(t) {
			continue
		}
		b.current[i] += t.weight
		total += t.weight
		if best < 0 || b.current[i] > b.current[best] {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b.current[best] -= total
	return b.targets[best]
}

// least returns the accepted target of the lowest score, ties taken in
// turn.
func (b *balancer) least(ok func(*target) bool, score func(*target) float64) *target {
	b.mu.Lock()
	start := b.next
	b.next++
	b.mu.Unlock()
	n := len(b.targets)
	var best *target
	bestScore := 0.0
	for k := range n {
		t := b.targets[(start+k)%n]
		if !ok(t) {
			continue
		}
		if s := score(t); best == nil || s < bestScore {
			best, bestScore = t, s
		}
	}
	return best
}

// hashed walks the ring from key's point to the first accepted target.
func (b *balancer) hashed(key string, ok func(*target) bool) *target {
	h := crc32.ChecksumIEEE([]byte(key))
	i := sort.Search(len(b.ring), func(i int) bool { return b.ring[i].hash >= h })
	for k := range len(b.ring) {
		p := b.ring[(i+k)%len(b.ring)]
		if t := b.targets[p.target]; ok(t) {
			return t
		}
	}
	return nil
}

// observeLatency folds one upstream latency into the target's EWMA.
func (t *target) observeLatency(d time.Duration) {
	for {
		old := t.ewma.Load()
		nv := int64(d)
		if old != 0 {
			nv = old + (int64(d)-old)/4
		}
		if t.ewma.CompareAndSwap(old, nv) {
			return
		}
	}
}

// outcome is what one request or probe found out about a target.
type outcome int

const (
	outcomeNone outcome = iota // a status in neither list
	outcomeSuccess
	outcomeTCPFailure
	outcomeTimeout
	outcomeHTTPFailure
)

// report counts an outcome of a check (byActive or byPassive) and flips
// the target's health when a threshold is reached. It returns true when
// the health changed.
func (t *target) report(by int, o outcome, healthy kongconf.HealthyRule, unhealthy kongconf.UnhealthyRule) bool {
	if o == outcomeNone {
		return false
	}
	t.hmu.Lock()
	defer t.hmu.Unlock()
	c := &t.counts[by]
	was := t.healthy.Load()
	flip := false
	if o == outcomeSuccess {
		*c = healthCounts{successes: c.successes + 1}
		flip = !was && healthy.Successes > 0 && c.successes >= healthy.Successes
	} else {
		c.successes = 0
		switch o {
		case outcomeTCPFailure:
			c.tcpFailures++
			flip = unhealthy.TCPFailures > 0 && c.tcpFailures >= unhealthy.TCPFailures
		case outcomeTimeout:
			c.timeouts++
			flip = unhealthy.Timeouts > 0 && c.timeouts >= unhealthy.Timeouts
		case outcomeHTTPFailure:
			c.httpFailures++
			flip = unhealthy.HTTPFailures > 0 && c.httpFailures >= unhealthy.HTTPFailures
		}
		flip = flip && was
	}
	if flip {
		t.healthy.Store(!was)
		t.counts = [2]healthCounts{}
	}
	return flip
}

// statusOutcome classifies a response status by a check's lists.
func statusOutcome(status int, healthy, unhealthy []int) outcome {
	for _, s := range unhealthy {
		if s == status {
			return outcomeHTTPFailure
		}
	}
	for _, s := range healthy {
		if s == status {
			return outcomeSuccess
		}
	}
	return outcomeNone
}

// hashKey is what consistent-hashing hashes for a request: hash_on's
// value, else hash_fallback's. cookie reports a cookie to set when
// hash_on is cookie and the client sent none (Kong sets one so the client
// sticks to a target).
func hashKey(up *kongconf.Upstream, x *Exchange) (key, cookie string) {
	if up.Algorithm != "consistent-hashing" || up.HashOn == "none" {
		return "", ""
	}
	if k := hashValue(up.HashOn, up.HashOnHeader, up.HashOnQueryArg, up.HashOnURICapture, up, x); k != "" {
		return k, ""
	}
	if up.HashOn == "cookie" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		v := hex.EncodeToString(b[:])
		v = v[0:8] + "-" + v[8:12] + "-" + v[12:16] + "-" + v[16:20] + "-" + v[20:32]
		return v, v
	}
	return hashValue(up.HashFallback, up.HashFallbackHeader, up.HashFallbackQueryArg, up.HashFallbackURICapture, up, x), ""
}

func hashValue(kind, header, queryArg, capture string, up *kongconf.Upstream, x *Exchange) string {
	switch kind {
	case "consumer":
		if x.Consumer != nil {
			return x.Consumer.ID
		}
		return x.Credential
	case "ip":
		if x.ClientIP.IsValid() {
			return x.clientIP()
		}
	case "header":
		var vals []string
		for _, v := range x.ctx.Request.Header.PeekAll(header) {
			vals = append(vals, string(v))
		}
		return strings.Join(vals, ",")
	case "cookie":
		return string(x.ctx.Request.Header.Cookie(up.HashOnCookie))
	case "path":
		return x.Path()
	case "query_arg":
		var vals []string
		for _, v := range x.ctx.QueryArgs().PeekMulti(queryArg) {
			vals = append(vals, string(v))
		}
		return strings.Join(vals, ",")
	case "uri_capture":
		return x.Match.Captures[capture]
	}
	return ""
}
