package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// Seeing and controlling who is limited: what an instance is (Info), the
// counter of one identifier value (Counter), clearing it (Reset), what a
// request would get without counting it (Explain) and the heaviest
// identifiers of the last minute (Top). Adapters expose them on their
// admin endpoints (docs/admin-api.md); they only translate.

// ErrNotInspectable is returned when an instance's store cannot read or
// reset counters (a store from RegistryOptions.NewLocalStore or
// NewRedisStore that is not a ratelimit.Inspector).
var ErrNotInspectable = errors.New("policy: the store cannot inspect counters")

// StoreState describes the store of an instance's namespace on this node.
type StoreState struct {
	// State is "local" (strategy local or cluster), "connected" (Redis
	// answers) or "fallback" (Redis does not answer: counting locally).
	State string `json:"state"`
	// Since is when the state began (for Redis, when the store was opened
	// or last changed state).
	Since time.Time `json:"since,omitzero"`
	// Reason is why Redis is refused, when known ("auth", "tls"...).
	Reason string `json:"reason,omitempty"`
	// Counters is the number of counters this node holds for the
	// namespace (for Redis: its local copies).
	Counters int `json:"counters"`
	// Redis is the Redis the namespace counts in, for the redis strategy.
	Redis *RedisTarget `json:"redis,omitempty"`
}

// RedisTarget names the Redis a store counts in, without credentials.
type RedisTarget struct {
	Host           string   `json:"host,omitempty"`
	Port           int64    `json:"port,omitempty"`
	Database       int64    `json:"database,omitempty"`
	SSL            bool     `json:"ssl,omitempty"`
	SentinelMaster string   `json:"sentinel_master,omitempty"`
	SentinelNodes  []string `json:"sentinel_nodes,omitempty"`
	ClusterNodes   []string `json:"cluster_nodes,omitempty"`
}

// targetOf is the RedisTarget of c.
func targetOf(c *RedisConfig) *RedisTarget {
	t := &RedisTarget{Database: c.Database, SSL: c.SSL}
	switch {
	case len(c.ClusterNodes) > 0:
		for _, n := range c.ClusterNodes {
			t.ClusterNodes = append(t.ClusterNodes, net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)))
		}
	case len(c.SentinelNodes) > 0:
		if c.SentinelMaster != nil {
			t.SentinelMaster = *c.SentinelMaster
		}
		for _, n := range c.SentinelNodes {
			t.SentinelNodes = append(t.SentinelNodes, net.JoinHostPort(n.Host, strconv.FormatInt(n.Port, 10)))
		}
	default:
		if c.Host != nil {
			t.Host = *c.Host
		}
		if c.Port != nil {
			t.Port = *c.Port
		}
	}
	return t
}

// LimitInfo is one configured window.
type LimitInfo struct {
	Limit int64 `json:"limit"`
	// Window is the window size in seconds.
	Window int64  `json:"window"`
	Name   string `json:"name,omitempty"`
}

// Info describes a compiled instance for listing.
type Info struct {
	Namespace  string      `json:"namespace"`
	Strategy   string      `json:"strategy"`
	SyncRate   *float64    `json:"sync_rate"`
	WindowType string      `json:"window_type,omitempty"`
	Identifier string      `json:"identifier"`
	Limits     []LimitInfo `json:"limits"`
	Store      StoreState  `json:"store"`
}

// WindowState is one window of one identifier's counter.
type WindowState struct {
	// Window is the window size in seconds; Name names it ("minute").
	Window     int64  `json:"window"`
	Name       string `json:"name,omitempty"`
	WindowType string `json:"window_type"`
	Limit      int64  `json:"limit"`
	// Current and Previous are the counts of the current window (starting
	// at WindowStart) and of the one before it.
	Current     int64     `json:"current"`
	Previous    int64     `json:"previous"`
	WindowStart time.Time `json:"window_start,omitzero"`
	// Rate is what is compared with Limit: Current for a fixed window,
	// Current plus the overlapping share of Previous for a sliding one.
	Rate float64 `json:"rate"`
	// Remaining is how many more requests the window admits now.
	Remaining int64 `json:"remaining"`
	// Reset is the seconds until the window no longer limits (the
	// RateLimit-Reset a request now would see, without the pin rule).
	Reset int64 `json:"reset"`
}

// LeaseInfo is one live concurrency lease.
type LeaseInfo struct {
	ID      string    `json:"id"`
	Expires time.Time `json:"expires"`
}

// Counter is the counter of one identifier value as an instance computes
// it.
type Counter struct {
	// Identifier is the identifier value asked about; Key is the counter
	// key in the store (the identifier itself, hashed when longer than 256
	// bytes, or with the scope in front for rate-limiting).
	Identifier string        `json:"identifier"`
	Key        string        `json:"counter_key"`
	Namespace  string        `json:"namespace"`
	Windows    []WindowState `json:"windows,omitempty"`
	// Limit and Leases are a concurrency instance's: the most leases at
	// once, and those alive.
	Limit  int64       `json:"limit,omitempty"`
	Leases []LeaseInfo `json:"leases,omitempty"`
}

// Empty reports whether the counter holds nothing: no count in any window
// and no lease.
func (c *Counter) Empty() bool {
	for _, w := range c.Windows {
		if w.Current != 0 || w.Previous != 0 {
			return false
		}
	}
	return len(c.Leases) == 0
}

// A CounterResetter reads and resets the counters of an instance
// (Advanced, Basic, Concurrency).
type CounterResetter interface {
	Counter(ctx context.Context, identifier string, now time.Time) (Counter, error)
	Reset(ctx context.Context, identifier string, now time.Time) error
}

// ResetCounter resets the counter of identifier in x and reports whether
// x held a count for it, as Counter reads it (true when that read fails:
// nothing can be said). The reset is sent either way: with a positive
// sync_rate Counter reads this node's counters, and other nodes' counts
// are in Redis only.
func ResetCounter(ctx context.Context, x CounterResetter, identifier string, now time.Time) (held bool, err error) {
	c, err := x.Counter(ctx, identifier, now)
	held = err != nil || !c.Empty()
	return held, x.Reset(ctx, identifier, now)
}

// Explanation is what a request would get from an instance, found without
// counting it.
type Explanation struct {
	Counter
	// Allowed is whether the request would pass this instance; Denied
	// whether a limit is exceeded (with shadow mode on, both can be true).
	Allowed bool `json:"allowed"`
	Denied  bool `json:"denied"`
	// DeniedWindow is the window in seconds that would deny it, 0 if none.
	DeniedWindow int64 `json:"denied_window,omitempty"`
	// Status is the rejection's status; 0 when allowed.
	Status int `json:"status,omitempty"`
}

// storeState reports the state of s, the store of k, on this node.
func (r *Registry) storeState(k storeKey, s Store) StoreState {
	r.mu.Lock()
	var health *redisHealth
	if e := r.stores[k]; e != nil && e.store == s {
		health = e.health
	}
	r.mu.Unlock()
	switch st := s.(type) {
	case *redisstore.Store:
		if health != nil {
			out := health.state()
			out.Counters = st.Stats().Keys
			return out
		}
	case *memorystore.Store:
		return StoreState{State: "local", Counters: st.Len()}
	}
	return StoreState{State: "custom"}
}

func (h *redisHealth) state() StoreState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := StoreState{State: "connected", Since: h.since, Redis: h.target}
	if h.degraded {
		out.State, out.Reason = "fallback", h.reason
	}
	return out
}

// inspector returns the store as an Inspector.
func inspector(s Store) (ratelimit.Inspector, error) {
	in, ok := s.(ratelimit.Inspector)
	if !ok {
		return nil, ErrNotInspectable
	}
	return in, nil
}

// normalize turns an identifier value into the counter key the store
// holds, as keySpec.key does.
func normalize(v string) string {
	if len(v) > maxKeyLen {
		sum := sha256.Sum256([]byte(v))
		return hex.EncodeToString(sum[:])
	}
	return v
}

// WindowStates computes the windows of counters read at now, naming
// window i names[i] when there is one: what Counter reports, for adapters
// that read a store themselves.
func WindowStates(cs []ratelimit.CounterState, names []string, now time.Time) []WindowState {
	out := make([]WindowState, len(cs))
	for i, c := range cs {
		l := c.Limit
		if l.Algorithm == ratelimit.TokenBucket {
			out[i] = bucketState(c, now)
			if i < len(names) {
				out[i].Name = names[i]
			}
			continue
		}
		w := WindowState{Window: int64(l.Window / time.Second), WindowType: WindowSliding, Limit: l.Count,
			Current: c.Current, Previous: c.Previous, WindowStart: c.Start}
		if i < len(names) {
			w.Name = names[i]
		}
		left := c.Start.Add(l.Window).Sub(now)
		rate := float64(c.Current)
		if l.Algorithm == ratelimit.FixedWindow {
			w.WindowType = WindowFixed
		} else {
			rate += float64(c.Previous) * float64(left) / float64(l.Window)
		}
		w.Rate = math.Round(rate*1000) / 1000
		w.Remaining = max(0, int64(math.Floor(float64(l.Count)-rate)))
		reset := max(1, int64(math.Ceil(left.Seconds())))
		if l.Algorithm != ratelimit.FixedWindow && rate > float64(l.Count) {
			reset = int64(math.Ceil(float64(reset) + (rate-float64(l.Count))/float64(l.Count)*l.Window.Seconds()))
		}
		w.Reset = reset
		out[i] = w
	}
	return out
}

// bucketState is a token bucket's WindowState: Current is the tokens
// taken (the bucket's capacity less those left), Remaining those left,
// Reset the seconds until it is full again; it has no window start.
func bucketState(c ratelimit.CounterState, now time.Time) WindowState {
	l := c.Limit
	capacity := l.Capacity()
	emission := time.Duration(storekit.Emission(&l)) * time.Microsecond
	remaining := capacity
	if ahead := c.Start.Sub(now); ahead > 0 {
		remaining = max(0, capacity-int64((ahead+emission-1)/emission))
	}
	w := WindowState{Window: int64(l.Window / time.Second), WindowType: WindowTokenBucket, Limit: l.Count,
		Current: capacity - remaining, Rate: float64(capacity - remaining), Remaining: remaining}
	if ahead := c.Start.Sub(now); ahead > 0 {
		w.Reset = int64(math.Ceil(ahead.Seconds()))
	}
	return w
}

// planNames are the window names of p, as the headers show them.
func planNames(p *plan) []string {
	names := make([]string, len(p.limits))
	for i, l := range p.limits {
		names[i] = WindowName(l.Window)
	}
	return names
}

// Info describes the instance.
func (a *Advanced) Info() Info {
	in := Info{Namespace: a.namespace, Strategy: a.strategy, SyncRate: a.syncRate, WindowType: WindowSliding,
		Identifier: a.identifierName(), Store: a.reg.storeState(a.storeKey, a.store)}
	if a.base.fixed {
		in.WindowType = WindowFixed
	}
	for i, l := range a.base.limits {
		in.Limits = append(in.Limits, LimitInfo{Limit: l.Count, Window: a.base.secs[i], Name: WindowName(l.Window)})
	}
	return in
}

func (a *Advanced) identifierName() string {
	if len(a.keys.compound) == 0 {
		return string(a.keys.id)
	}
	s := ""
	for i, id := range a.keys.compound {
		if i > 0 {
			s += ","
		}
		s += string(id)
	}
	return s
}

// Counter returns the counter of an identifier value (the counter key the
// instance computes: an IP, a consumer id or username, a header value, a
// composite key) in the plugin's own windows, read where the instance
// counts (Redis for the redis strategy). It counts nothing.
func (a *Advanced) Counter(ctx context.Context, identifier string, now time.Time) (Counter, error) {
	return a.counter(ctx, identifier, a.base, now)
}

func (a *Advanced) counter(ctx context.Context, identifier string, p *plan, now time.Time) (Counter, error) {
	if now.IsZero() {
		now = time.Now()
	}
	key := normalize(identifier)
	in, err := inspector(a.store)
	if err != nil {
		return Counter{}, err
	}
	cs, err := in.Inspect(ctx, ratelimit.Request{Key: key, Limits: p.limits, Now: now})
	if err != nil {
		return Counter{}, fmt.Errorf("policy: inspecting namespace %q: %w", a.namespace, err)
	}
	return Counter{Identifier: identifier, Key: key, Namespace: a.namespace, Windows: WindowStates(cs, planNames(p), now)}, nil
}

// Reset clears every window of an identifier value: the plugin's windows
// and its consumer-group overrides' (quota windows of sluice-dimensions
// are not known in advance and are not reset). In Redis, every node
// sharing it sees the reset (see redisstore.Store.Reset for how soon).
func (a *Advanced) Reset(ctx context.Context, identifier string, now time.Time) error {
	if now.IsZero() {
		now = time.Now()
	}
	in, err := inspector(a.store)
	if err != nil {
		return err
	}
	limits := append([]ratelimit.Limit(nil), a.base.limits...)
	for _, o := range a.overrides {
		if o != nil {
			limits = append(limits, o.limits...)
		}
	}
	if err := in.Reset(ctx, ratelimit.Request{Key: normalize(identifier), Limits: limits, Now: now}); err != nil {
		return fmt.Errorf("policy: resetting namespace %q: %w", a.namespace, err)
	}
	a.reg.pins.unpinKey(a.namespace, normalize(identifier))
	return nil
}

// Explain says what r would get, without counting it: the identifier
// value and counter key, the counts of the plan r would be checked
// against, and whether it would be allowed.
func (a *Advanced) Explain(ctx context.Context, r *Request) (Explanation, error) {
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	key := a.keys.key(r)
	p, _ := a.selectPlan(r)
	d, err := a.store.Take(ctx, ratelimit.Request{Key: key, Limits: p.limits, Now: now, Penalty: p.penalty, Peek: true})
	if err != nil {
		return Explanation{}, fmt.Errorf("policy: explaining namespace %q: %w", a.namespace, err)
	}
	c, err := a.counter(ctx, key, p, now)
	if err != nil {
		return Explanation{}, err
	}
	ex := Explanation{Counter: c, Allowed: d.Allowed || a.shadow, Denied: !d.Allowed}
	if !d.Allowed {
		ex.DeniedWindow = int64(d.State(d.Denied).Limit.Window / time.Second)
		if !a.shadow {
			ex.Status = a.errorCode
		}
	}
	return ex, nil
}

// Top returns the n heaviest identifiers of the minute before now.
func (a *Advanced) Top(now time.Time, by TopBy, n int) []TopEntry { return a.top.Top(now, by, n) }

// Info describes the instance.
func (b *Basic) Info() Info {
	sr := b.syncRate
	in := Info{Namespace: basicNamespace, Strategy: b.policy, SyncRate: &sr, WindowType: WindowFixed,
		Identifier: string(b.keys.id), Store: b.reg.storeState(b.storeKey, b.store.(Store))}
	for _, p := range b.all {
		in.Limits = append(in.Limits, LimitInfo{Limit: p.limit, Window: int64(p.len / time.Second), Name: p.name})
	}
	return in
}

// Counter returns the counter of an identifier value in every period; see
// Advanced.Counter.
func (b *Basic) Counter(ctx context.Context, identifier string, now time.Time) (Counter, error) {
	if now.IsZero() {
		now = time.Now()
	}
	in, err := inspector(b.store.(Store))
	if err != nil {
		return Counter{}, err
	}
	id := normalize(identifier)
	key := ratelimit.Key(b.scope[0], b.scope[1], id)
	c := Counter{Identifier: identifier, Key: key, Namespace: basicNamespace}
	if len(b.short) > 0 {
		cs, err := in.Inspect(ctx, ratelimit.Request{Key: key, Limits: b.shortLims, Now: now})
		if err != nil {
			return Counter{}, fmt.Errorf("policy: inspecting rate-limiting counters: %w", err)
		}
		names := make([]string, len(b.short))
		for i, p := range b.short {
			names[i] = p.name
		}
		c.Windows = WindowStates(cs, names, now)
	}
	for _, p := range b.calendar {
		cc := b.calendarCounter(p, id, now)
		cs, err := in.Inspect(ctx, ratelimit.Request{Key: cc.key, Limits: []ratelimit.Limit{cc.limit}, Now: cc.now})
		if err != nil {
			return Counter{}, fmt.Errorf("policy: inspecting rate-limiting counters: %w", err)
		}
		end := calendarStart(p.name, cc.now.AddDate(0, 1, 0))
		if p.name == "year" {
			end = cc.now.AddDate(1, 0, 0)
		}
		w := WindowState{Window: int64(p.len / time.Second), Name: p.name, WindowType: WindowFixed, Limit: p.limit,
			Current: cs[0].Current, WindowStart: cc.now, Rate: float64(cs[0].Current),
			Remaining: max(0, p.limit-cs[0].Current), Reset: max(1, int64(math.Ceil(end.Sub(now).Seconds())))}
		c.Windows = append(c.Windows, w)
	}
	return c, nil
}

// Reset clears every period of an identifier value; see Advanced.Reset.
func (b *Basic) Reset(ctx context.Context, identifier string, now time.Time) error {
	if now.IsZero() {
		now = time.Now()
	}
	in, err := inspector(b.store.(Store))
	if err != nil {
		return err
	}
	id := normalize(identifier)
	key := ratelimit.Key(b.scope[0], b.scope[1], id)
	if len(b.short) > 0 {
		if err := in.Reset(ctx, ratelimit.Request{Key: key, Limits: b.shortLims, Now: now}); err != nil {
			return fmt.Errorf("policy: resetting rate-limiting counters: %w", err)
		}
	}
	for _, p := range b.calendar {
		cc := b.calendarCounter(p, id, now)
		if err := in.Reset(ctx, ratelimit.Request{Key: cc.key, Limits: []ratelimit.Limit{cc.limit}, Now: cc.now}); err != nil {
			return fmt.Errorf("policy: resetting rate-limiting counters: %w", err)
		}
	}
	return nil
}

// Explain says what r would get, without counting it (Kong's rule: allowed
// iff every period's count is below its limit).
func (b *Basic) Explain(ctx context.Context, r *Request) (Explanation, error) {
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	c, err := b.Counter(ctx, b.keys.key(r), now)
	if err != nil {
		return Explanation{}, err
	}
	ex := Explanation{Counter: c, Allowed: true}
	for _, w := range c.Windows {
		if w.Current >= w.Limit {
			ex.Denied, ex.DeniedWindow = true, w.Window
			break
		}
	}
	if ex.Denied && !b.shadow {
		ex.Allowed, ex.Status = false, b.errorCode
	}
	return ex, nil
}

// Top returns the n heaviest identifiers of the minute before now.
func (b *Basic) Top(now time.Time, by TopBy, n int) []TopEntry { return b.top.Top(now, by, n) }

// Info describes the instance.
func (c *Concurrency) Info() Info {
	return Info{Namespace: c.key.namespace, Strategy: c.strategy, Identifier: string(c.ident),
		Limits: []LimitInfo{{Limit: c.max}}, Store: c.reg.storeState(c.key, c.store)}
}

// leaseKeys are the lease keys an identifier value can be held under: the
// configured identifier's and, unless it is ip, the client IP's, where a
// request without the identifier is counted (Top lists both by value).
func (c *Concurrency) leaseKeys(identifier string) []string {
	keys := []string{ratelimit.Key(string(c.ident), identifier)}
	if c.ident != ByIP {
		keys = append(keys, ratelimit.Key(string(ByIP), identifier))
	}
	return keys
}

func leaseInspector(s Store) (ratelimit.LeaseInspector, error) {
	in, ok := s.(ratelimit.LeaseInspector)
	if !ok {
		return nil, ErrNotInspectable
	}
	return in, nil
}

// Counter returns the leases held by an identifier value, as Top lists
// it: under the configured identifier or, when it holds none, under the
// client IP a request without the identifier falls back to.
func (c *Concurrency) Counter(ctx context.Context, identifier string, now time.Time) (Counter, error) {
	var first Counter
	for i, key := range c.leaseKeys(identifier) {
		cnt, err := c.counter(ctx, identifier, key, now)
		if err != nil || len(cnt.Leases) > 0 {
			return cnt, err
		}
		if i == 0 {
			first = cnt
		}
	}
	return first, nil
}

func (c *Concurrency) counter(ctx context.Context, identifier, key string, now time.Time) (Counter, error) {
	in, err := leaseInspector(c.store)
	if err != nil {
		return Counter{}, err
	}
	ls, err := in.Leases(ctx, key, now)
	if err != nil {
		return Counter{}, fmt.Errorf("policy: reading leases of namespace %q: %w", c.key.namespace, err)
	}
	out := Counter{Identifier: identifier, Key: key, Namespace: c.key.namespace, Limit: c.max, Leases: []LeaseInfo{}}
	for _, l := range ls {
		out.Leases = append(out.Leases, LeaseInfo{ID: l.ID, Expires: l.Expires})
	}
	if len(out.Leases) == 0 {
		out.Leases = nil
	}
	return out, nil
}

// Reset drops every lease of an identifier value: those under the
// configured identifier and those under the client IP fallback (see
// Counter).
func (c *Concurrency) Reset(ctx context.Context, identifier string, _ time.Time) error {
	in, err := leaseInspector(c.store)
	if err != nil {
		return err
	}
	for _, key := range c.leaseKeys(identifier) {
		if err := in.ResetLeases(ctx, key); err != nil {
			return fmt.Errorf("policy: resetting leases of namespace %q: %w", c.key.namespace, err)
		}
	}
	return nil
}

// Explain says whether r would get a lease now, without taking one.
func (c *Concurrency) Explain(ctx context.Context, r *Request) (Explanation, error) {
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	ident, v := c.identify(r)
	cnt, err := c.counter(ctx, v, ratelimit.Key(ident, v), now)
	if err != nil {
		return Explanation{}, err
	}
	ex := Explanation{Counter: cnt, Allowed: int64(len(cnt.Leases)) < c.max}
	if !ex.Allowed {
		ex.Denied, ex.Status = true, c.status
	}
	return ex, nil
}

// Top returns the n heaviest identifiers of the minute before now.
func (c *Concurrency) Top(now time.Time, by TopBy, n int) []TopEntry { return c.top.Top(now, by, n) }

// topRef is a shared sketch and its references.
type topRef struct {
	t    *TopKeys
	refs int
}

// topFor returns the sketch of an instance identity, made on first use;
// releaseTop gives the reference back. A reload compiles the new instance
// before closing the old one, so the list lives on.
func (r *Registry) topFor(id string) *TopKeys {
	if r.opts.TopKeys < 0 {
		return nil
	}
	r.topMu.Lock()
	defer r.topMu.Unlock()
	if r.tops == nil {
		r.tops = map[string]*topRef{}
	}
	ref := r.tops[id]
	if ref == nil {
		ref = &topRef{t: NewTopKeys(r.opts.TopKeys)}
		r.tops[id] = ref
	}
	ref.refs++
	return ref.t
}

func (r *Registry) releaseTop(id string) {
	r.topMu.Lock()
	defer r.topMu.Unlock()
	if ref := r.tops[id]; ref != nil {
		if ref.refs--; ref.refs <= 0 {
			delete(r.tops, id)
		}
	}
}
