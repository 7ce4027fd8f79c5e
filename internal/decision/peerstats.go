package decision

import (
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// peerStats counts envoyproxy/ratelimit's per-limit statistics, by its
// names and its accounting: each counts hits (a request's hits_addend),
// not requests, and a call over the limit counts its hits past the limit
// as over_limit and those between the near-limit threshold and the limit
// as near_limit, as if every call were added to the counter (see
// docs/decision-service.md, "Statistics").
type peerStats struct {
	nearRatio float64
	mu        sync.RWMutex
	limits    map[string]*limitCounters
	// notFound counts, per unknown domain, the descriptors asked about
	// (ratelimit.service.rate_limit.<domain>.domain_not_found), for at
	// most maxNotFoundDomains domains: callers choose the names.
	notFound     map[string]*atomic.Uint64
	globalShadow atomic.Uint64
	// The service's own: reloads and calls.
	loadSuccess, loadError, requests atomic.Uint64
	// responseTime is ratelimit_server.ShouldRateLimit.response_time.
	responseTime msCounts
	// methods are the other unary gRPC methods served (the health
	// check's Check), by method name, for ratelimit_server.<method>.*.
	methodsMu sync.Mutex
	methods   map[string]*methodStats
}

// methodStats are one gRPC method's total_requests and response_time.
type methodStats struct {
	requests     atomic.Uint64
	responseTime msCounts
}

// method returns the statistics of the unary gRPC method name.
func (p *peerStats) method(name string) *methodStats {
	p.methodsMu.Lock()
	defer p.methodsMu.Unlock()
	m := p.methods[name]
	if m == nil {
		if p.methods == nil {
			p.methods = map[string]*methodStats{}
		}
		m = &methodStats{}
		p.methods[name] = m
	}
	return m
}

// A namedTimer is a timer's statsd name and its counts.
type namedTimer struct {
	name string
	c    *msCounts
}

// timers returns every timer, ShouldRateLimit's first, the others by name.
func (p *peerStats) timers() []namedTimer {
	out := []namedTimer{{responseTimeName, &p.responseTime}}
	p.methodsMu.Lock()
	for name, m := range p.methods {
		out = append(out, namedTimer{"ratelimit_server." + name + ".response_time", &m.responseTime})
	}
	p.methodsMu.Unlock()
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].name < out[1+j].name })
	return out
}

// responseTimeName is the peer's gRPC timer for ShouldRateLimit, in whole
// milliseconds.
const responseTimeName = "ratelimit_server.ShouldRateLimit.response_time"

// msCounts counts durations by whole milliseconds (truncated, as the peer
// records them), since the service started. Durations under smallMs ms
// take one atomic add; longer ones a mutex.
type msCounts struct {
	small [smallMs]atomic.Uint64
	mu    sync.Mutex
	large map[uint64]uint64
}

const smallMs = 1024

func (c *msCounts) add(d time.Duration) {
	ms := uint64(max(d, 0).Milliseconds())
	if ms < smallMs {
		c.small[ms].Add(1)
		return
	}
	c.mu.Lock()
	if c.large == nil {
		c.large = map[uint64]uint64{}
	}
	c.large[ms]++
	c.mu.Unlock()
}

// each calls f with every millisecond value counted and its count so far,
// in increasing order of ms.
func (c *msCounts) each(f func(ms, n uint64)) {
	for ms := range c.small {
		if n := c.small[ms].Load(); n > 0 {
			f(uint64(ms), n)
		}
	}
	c.mu.Lock()
	keys := make([]uint64, 0, len(c.large))
	for ms := range c.large {
		keys = append(keys, ms)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	counts := make([]uint64, len(keys))
	for i, ms := range keys {
		counts[i] = c.large[ms]
	}
	c.mu.Unlock()
	for i, ms := range keys {
		f(ms, counts[i])
	}
}

type limitCounters struct {
	total, over, near, within, shadow, overLocal atomic.Uint64
}

// The statistics of one limit, in the order of limitCounters.
var peerStatNames = [...]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode", "over_limit_with_local_cache"}

func newPeerStats(nearRatio float64) *peerStats {
	if nearRatio <= 0 || nearRatio > 1 {
		nearRatio = 0.8
	}
	return &peerStats{nearRatio: nearRatio, limits: map[string]*limitCounters{}}
}

// get returns the counters of a limit's statistics, name as statName
// gives it (sanitized).
func (p *peerStats) get(name string) *limitCounters {
	p.mu.RLock()
	c := p.limits[name]
	p.mu.RUnlock()
	if c != nil {
		return c
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c = p.limits[name]; c == nil {
		c = &limitCounters{}
		p.limits[name] = c
	}
	return c
}

func add(c *atomic.Uint64, n int64) {
	if n > 0 {
		c.Add(uint64(n))
	}
}

// observe counts one decided call of hits against limit, the counter at
// before without it and after with it.
func (p *peerStats) observe(name string, limit, before, after, hits int64, allowed, shadow bool) {
	c := p.get(name)
	add(&c.total, hits)
	near := int64(math.Floor(float64(limit) * p.nearRatio))
	if !allowed {
		overBy := hits
		if before < limit && after > limit {
			overBy = after - limit
			add(&c.near, limit-max(near, before))
		}
		add(&c.over, overBy)
		if shadow {
			add(&c.shadow, overBy)
		}
		return
	}
	if after > near {
		if before >= near {
			add(&c.near, hits)
		} else {
			add(&c.near, after-near)
		}
	}
	add(&c.within, hits)
}

// maxNotFoundDomains bounds how many unknown domains get a
// domain_not_found statistic; later ones are not counted.
const maxNotFoundDomains = 100

// domainNotFound counts n descriptors of a request for a domain the
// configuration does not have, as envoyproxy/ratelimit does (one per
// descriptor looked up).
func (p *peerStats) domainNotFound(domain string, n int) {
	domain = sanitizeStatName(domain)
	p.mu.RLock()
	c := p.notFound[domain]
	p.mu.RUnlock()
	if c == nil {
		p.mu.Lock()
		if c = p.notFound[domain]; c == nil && len(p.notFound) < maxNotFoundDomains {
			if p.notFound == nil {
				p.notFound = map[string]*atomic.Uint64{}
			}
			c = new(atomic.Uint64)
			p.notFound[domain] = c
		}
		p.mu.Unlock()
		if c == nil {
			return
		}
	}
	c.Add(uint64(n))
}

// observeLocalCache counts a call answered by the local over-limit cache.
func (p *peerStats) observeLocalCache(name string, hits int64, shadow bool) {
	c := p.get(name)
	add(&c.total, hits)
	add(&c.over, hits)
	add(&c.overLocal, hits)
	if shadow {
		add(&c.shadow, hits)
	}
}

// A PeerStat is one of envoyproxy/ratelimit's statistics and its count
// since the service started.
type PeerStat struct {
	Name  string
	Value uint64
}

// PeerStats returns envoyproxy/ratelimit's statistics counted so far
// (Options.PeerStats), sorted by name: for each limit seen,
// ratelimit.service.rate_limit.<domain>.<key path>.<stat>; for each
// unknown domain asked about (the first 100),
// ratelimit.service.rate_limit.<domain>.domain_not_found; and
// ratelimit.service.global_shadow_mode, ratelimit.service.config_load_success,
// ratelimit.service.config_load_error,
// ratelimit_server.ShouldRateLimit.total_requests and, for each other
// unary gRPC method served by NewGRPCServer (the health check's Check),
// ratelimit_server.<method>.total_requests. Counters only grow.
func (s *Service) PeerStats() []PeerStat {
	p := s.peer
	if p == nil {
		return nil
	}
	p.mu.RLock()
	out := make([]PeerStat, 0, len(p.limits)*len(peerStatNames)+1)
	for name, c := range p.limits {
		for i, v := range []*atomic.Uint64{&c.total, &c.over, &c.near, &c.within, &c.shadow, &c.overLocal} {
			out = append(out, PeerStat{Name: "ratelimit.service.rate_limit." + name + "." + peerStatNames[i], Value: v.Load()})
		}
	}
	for domain, c := range p.notFound {
		out = append(out, PeerStat{Name: "ratelimit.service.rate_limit." + domain + ".domain_not_found", Value: c.Load()})
	}
	p.mu.RUnlock()
	out = append(out,
		PeerStat{Name: "ratelimit.service.global_shadow_mode", Value: p.globalShadow.Load()},
		PeerStat{Name: "ratelimit.service.config_load_success", Value: p.loadSuccess.Load()},
		PeerStat{Name: "ratelimit.service.config_load_error", Value: p.loadError.Load()},
		PeerStat{Name: "ratelimit_server.ShouldRateLimit.total_requests", Value: p.requests.Load()},
	)
	p.methodsMu.Lock()
	for name, m := range p.methods {
		out = append(out, PeerStat{Name: "ratelimit_server." + name + ".total_requests", Value: m.requests.Load()})
	}
	p.methodsMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ipv4 finds IPv4 addresses in a statistic's name.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStatName makes a statistic's name safe for statsd, as
// envoyproxy/ratelimit does: ":" and "|" become "_", and so do the dots of
// an IPv4 address (a remote_address value); control characters too, so
// that a name from a request (a domain, a detailed_metric value) cannot
// end a line and write one of its own.
func sanitizeStatName(s string) string {
	if !needsSanitizing(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c == ':' || c == '|' || c < 0x20 || c == 0x7f {
			b[i] = '_'
		}
	}
	return ipv4.ReplaceAllStringFunc(string(b), func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

func needsSanitizing(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ':' || c == '|' || c < 0x20 || c == 0x7f:
			return true
		case c == '.' && i > 0 && i+1 < len(s) && isDigit(s[i-1]) && isDigit(s[i+1]):
			return true
		}
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
