package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// Advanced is a compiled rate-limiting-advanced plugin instance, made by
// NewAdvanced (the zero value is not usable). It is safe for concurrent
// use; its config never changes (compile a new one to reload).
type Advanced struct {
	closed    atomic.Bool
	reg       *Registry
	storeKey  storeKey
	store     Store
	namespace string
	keys      keySpec
	base      *plan
	// overrides maps consumer_groups entries, in order, to their plan
	// (nil: the group has no override and the plugin's plan applies).
	groups    []string
	overrides []*plan
	enforce   bool

	// disablePenalty is kept for the plans of quota overrides, which are
	// compiled on first use and cached, at most maxQuotaPlans of them.
	disablePenalty bool
	quotaMu        sync.RWMutex
	quotaPlans     map[quotaKey]*plan

	hide       bool
	ietf       bool
	shadow     bool
	errorCode  int
	body       []byte
	throttling Throttling

	// For Info and Top (inspect.go).
	strategy string
	syncRate *float64
	top      *TopKeys
	topID    string
}

// plan is one set of windows: the plugin's or a consumer-group override's.
type plan struct {
	limits    []ratelimit.Limit
	secs      []int64
	fixed     bool
	penalty   bool
	jitterMax float64
	headers   headerPlan
}

func newPlan(limits, windows []int64, windowType string, disablePenalty bool, jitterMax float64) (*plan, error) {
	alg := ratelimit.SlidingWindow
	if windowType == WindowFixed {
		alg = ratelimit.FixedWindow
	}
	ls, err := Windows(alg, limits, windowDurations(windows))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if len(ls) == 0 {
		return nil, fmt.Errorf("%w: no limits", ErrInvalidConfig)
	}
	p := &plan{
		limits: ls,
		secs:   windows,
		fixed:  alg == ratelimit.FixedWindow,
		// Penalty: Kong keeps denied requests counted unless
		// disable_penalty is set, and always for fixed windows.
		penalty:   !disablePenalty || alg == ratelimit.FixedWindow,
		jitterMax: jitterMax,
	}
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = WindowName(l.Window)
	}
	p.headers = newHeaderPlan(names, names, limits, windows)
	return p, nil
}

// NewAdvanced compiles cfg into a limiter whose counters live in reg. A
// config from ParseAdvanced is valid; a hand-built one is validated first
// (a *ValidationError). The limiter takes a reference on its namespace's
// store: Close gives it back.
func NewAdvanced(cfg *AdvancedConfig, reg *Registry) (*Advanced, error) {
	c := *cfg
	d := &decoder{}
	if len(c.Limit) != len(c.WindowSize) {
		d.fail(pathConfig+".window_size", msgSameCount)
	}
	validateAdvanced(d, &c)
	if c.Namespace == "" || containsPipe(c.Namespace) {
		d.fail(pathConfig+".namespace", "namespace must be a non-empty string without '|'")
	}
	if c.ErrorCode < 100 || c.ErrorCode > 999 {
		d.fail(pathConfig+".error_code", "error_code must be a whole HTTP status between 100 and 999")
	}
	if c.WindowType != WindowSliding && c.WindowType != WindowFixed {
		d.fail(pathConfig+".window_type", enumMessage([]string{WindowSliding, WindowFixed}))
	}
	if c.Strategy != StrategyLocal && c.Strategy != StrategyRedis && c.Strategy != StrategyCluster {
		d.fail(pathConfig+".strategy", enumMessage([]string{StrategyLocal, StrategyRedis, StrategyCluster}))
	}
	for _, id := range append([]Identifier{c.Identifier}, c.CompoundIdentifier...) {
		if !slices.Contains(identifierNames, string(id)) {
			d.fail(pathConfig+".identifier", enumMessage(identifierNames))
			break
		}
	}
	if c.Throttling.Enabled && (c.Throttling.Interval <= 0 || c.Throttling.RetryTimes <= 0 || c.Throttling.QueueLimit <= 0) {
		d.fail(pathConfig+".throttling", "interval, retry_times and queue_limit must be greater than 0")
	}
	if len(d.errs) > 0 {
		return nil, &ValidationError{Errors: d.errs}
	}
	base, err := newPlan(c.Limit, c.WindowSize, c.WindowType, c.DisablePenalty, c.RetryAfterJitterMax)
	if err != nil {
		return nil, err
	}
	a := &Advanced{
		reg:       reg,
		namespace: c.Namespace,
		base:      base,
		keys: keySpec{
			id:         c.Identifier,
			compound:   c.CompoundIdentifier,
			counterKey: deref(c.CounterKey),
			headerName: deref(c.HeaderName),
			path:       deref(c.Path),
		},
		enforce:        c.EnforceConsumerGroups,
		disablePenalty: c.DisablePenalty,
		hide:           c.HideClientHeaders,
		ietf:           c.Sluice.IETFHeaders,
		shadow:         c.Sluice.Shadow,
		errorCode:      int(c.ErrorCode),
		body:           messageBody(c.ErrorMessage),
		throttling:     c.Throttling,
	}
	windows := append([]time.Duration(nil), windowDurations(c.WindowSize)...)
	for _, g := range c.ConsumerGroups {
		a.groups = append(a.groups, g)
		o := c.Overrides[g]
		if o == nil {
			a.overrides = append(a.overrides, nil)
			continue
		}
		// An override replaces limits, windows, window type and jitter;
		// the rest is the plugin's.
		p, err := newPlan(o.Limit, o.WindowSize, o.WindowType, c.DisablePenalty, o.RetryAfterJitterMax)
		if err != nil {
			return nil, fmt.Errorf("consumer group %q override: %w", g, err)
		}
		a.overrides = append(a.overrides, p)
		windows = append(windows, windowDurations(o.WindowSize)...)
	}
	syncRate := -1.0
	if c.SyncRate != nil {
		syncRate = *c.SyncRate
	}
	a.storeKey, a.store, err = reg.storeFor(c.Strategy, RedisStoreConfig{
		Namespace: c.Namespace, Redis: c.Redis, SyncRate: syncRate, Windows: windows,
		KongLayout: c.Sluice.RedisLayout == RedisLayoutKong,
	})
	if err != nil {
		return nil, fmt.Errorf("policy: building %s store of namespace %q: %w", c.Strategy, c.Namespace, err)
	}
	a.strategy, a.syncRate = c.Strategy, c.SyncRate
	a.topID = "rate-limiting-advanced|" + c.Namespace
	a.top = reg.topFor(a.topID)
	return a, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Close gives back the limiter's reference on its namespace's store; the
// store closes with the last reference, after which Check reports the
// store's closed error. Close is idempotent.
func (a *Advanced) Close() error {
	if a.closed.Swap(true) {
		return nil
	}
	a.reg.releaseTop(a.topID)
	return a.reg.release(a.storeKey)
}

// Namespace returns the namespace the counters live in.
func (a *Advanced) Namespace() string { return a.namespace }

// selectPlan picks the plan of r: a legacy consumer-group
// override when the first entry of consumer_groups that the consumer
// belongs to has one, else the request's quota override, else the
// plugin's own plan. An invalid quota is reported with the plugin's plan.
func (a *Advanced) selectPlan(r *Request) (*plan, error) {
	if p := a.groupPlan(r); p != nil {
		return p, nil
	}
	if len(r.Quota.Limits) == 0 {
		return a.base, nil
	}
	p, err := a.quotaPlan(&r.Quota)
	if err != nil {
		return a.base, err
	}
	return p, nil
}

// groupPlan returns the legacy consumer-group override of r, nil when none
// applies: the first entry of consumer_groups that the consumer belongs to
// decides, and an entry without an override leaves the plugin's plan.
func (a *Advanced) groupPlan(r *Request) *plan {
	if !a.enforce || r.Consumer.ID == "" || len(r.Groups) == 0 {
		return nil
	}
	for i, ref := range a.groups {
		for _, g := range r.Groups {
			if g.matches(ref) {
				return a.overrides[i]
			}
		}
	}
	return nil
}

// maxQuotaPlans bounds the quota plans one limiter caches; quotas beyond
// it (and quotas of more than len(quotaKey.limits) limits) are compiled
// on every request, which costs allocations but decides the same.
const maxQuotaPlans = 1024

// quotaKey identifies a quota plan: its windows and the window type.
type quotaKey struct {
	n      int
	fixed  bool
	limits [4]struct {
		count  int64
		window time.Duration
	}
}

// quotaPlan returns the plan of a quota override: its limits and windows,
// with the plugin's penalty and jitter settings, and its window type when
// it sets one (else the plugin's).
func (a *Advanced) quotaPlan(q *Quota) (*plan, error) {
	fixed := a.base.fixed
	if q.WindowTypeSet {
		alg := q.Limits[0].Algorithm
		if alg != ratelimit.SlidingWindow && alg != ratelimit.FixedWindow {
			return nil, fmt.Errorf("%w: window type %s, want sliding or fixed", ErrInvalidQuota, alg)
		}
		for _, l := range q.Limits[1:] {
			if l.Algorithm != alg {
				return nil, fmt.Errorf("%w: limits of one quota with different window types", ErrInvalidQuota)
			}
		}
		fixed = alg == ratelimit.FixedWindow
	}
	for i, l := range q.Limits {
		if l.Count <= 0 || l.Window < time.Second || l.Window%time.Second != 0 {
			return nil, fmt.Errorf("%w: limit %d is %d per %s, want a positive count per whole number of seconds", ErrInvalidQuota, i, l.Count, l.Window)
		}
	}
	var k quotaKey
	cacheable := len(q.Limits) <= len(k.limits)
	if cacheable {
		k.n, k.fixed = len(q.Limits), fixed
		for i, l := range q.Limits {
			k.limits[i].count, k.limits[i].window = l.Count, l.Window
		}
		a.quotaMu.RLock()
		p := a.quotaPlans[k]
		a.quotaMu.RUnlock()
		if p != nil {
			return p, nil
		}
	}
	counts := make([]int64, len(q.Limits))
	secs := make([]int64, len(q.Limits))
	for i, l := range q.Limits {
		counts[i], secs[i] = l.Count, int64(l.Window/time.Second)
	}
	wt := WindowSliding
	if fixed {
		wt = WindowFixed
	}
	p, err := newPlan(counts, secs, wt, a.disablePenalty, a.base.jitterMax)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidQuota, err)
	}
	if cacheable {
		a.quotaMu.Lock()
		if a.quotaPlans == nil {
			a.quotaPlans = make(map[quotaKey]*plan)
		}
		if len(a.quotaPlans) < maxQuotaPlans {
			a.quotaPlans[k] = p
		}
		a.quotaMu.Unlock()
	}
	return p, nil
}

// Check decides r: it counts the request in every window
// of the effective plan, in order, under the counter key of r, and returns
// the verdict with its headers. With throttling enabled a request that
// would be rejected waits in the waiting room: Check then
// blocks for up to interval*retry_times, and returns at once with ctx's
// error when ctx ends (the client is gone).
//
// A store failure is not a rejection: Kong's rate-limiting-advanced never
// fails a request because of its store. Check then returns an allowing
// Result without headers together with the error, for logging; the Redis
// store already falls back to local counting on its own. When the waiting
// room cannot be entered because its store failed, the request gets the
// normal rejection, with the error.
//
// A Request.Quota that is not a valid set of limits is not applied: the
// request is decided on the plugin's own limits and the error, wrapping
// ErrInvalidQuota, is returned with that result.
func (a *Advanced) Check(ctx context.Context, r *Request) (Result, error) {
	return a.CheckAppend(ctx, r, nil)
}

// CheckAppend is Check with the headers appended to dst, which the caller
// may reuse from request to request (Result.Headers then aliases it): with
// room for the headers, a check makes no allocation for them.
func (a *Advanced) CheckAppend(ctx context.Context, r *Request, dst []Header) (Result, error) {
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	key := a.keys.key(r)
	p, quotaErr := a.selectPlan(r)
	sr := ratelimit.Request{Key: key, Limits: p.limits, Now: now, Penalty: p.penalty}
	d, err := a.store.Take(ctx, sr)
	if err != nil {
		return Result{Allowed: true, Key: key}, withQuotaErr(fmt.Errorf("policy: checking namespace %q: %w", a.namespace, err), quotaErr)
	}
	res := Result{Key: key}
	if !d.Allowed && a.throttling.Enabled && !a.shadow {
		d, now, res.Retries, err = a.wait(ctx, &sr, d, now)
		if err != nil {
			a.result(&res, p, &d, now, dst)
			return res, withQuotaErr(err, quotaErr)
		}
	}
	a.result(&res, p, &d, now, dst)
	a.top.Record(now, key, res.Denied)
	return res, quotaErr
}

// withQuotaErr adds an invalid quota's error, if any, to err.
func withQuotaErr(err, quotaErr error) error {
	if quotaErr == nil {
		return err
	}
	return errors.Join(err, quotaErr)
}

// result fills res with the response to decision d.
func (a *Advanced) result(res *Result, p *plan, d *ratelimit.Decision, now time.Time, dst []Header) {
	res.Allowed, res.Denied = d.Allowed, !d.Allowed
	if d.Len() == 0 {
		// A store failure admitted the request: no headers to send.
		return
	}
	rep := d.Reported()
	var states []ratelimit.LimitState
	if d.Len() <= 4 {
		states = d.States() // aliases d
	} else {
		// States would copy them to the heap; copy them on the stack.
		states = make([]ratelimit.LimitState, 0, 16)
		for i := range d.Len() {
			states = append(states, d.State(i))
		}
	}
	rs := &states[rep]
	res.Window, res.Limit, res.Remaining = rs.Limit.Window, rs.Limit.Count, rs.Remaining
	if d.Allowed && a.reg.pins.n.Load() == 0 {
		// The usual case: no window is exceeded (the request was allowed),
		// so there is nothing to pin, no pin to delete, and the reset is
		// the end of the reported window, which the store's state gives:
		// W - (now - start) seconds, windows being whole seconds.
		res.Reset = max(1, int64((rs.Reset+time.Second-1)/time.Second))
	} else {
		// Pins are kept for every window on every evaluation, headers sent
		// or not, as Kong keeps them.
		repStart := a.updatePins(p, res.Key, d, rep, now)
		res.Reset = reset(p, rs, p.secs[rep], repStart, now)
	}
	if a.shadow {
		res.Allowed = true
		return
	}
	if !d.Allowed {
		res.Status = a.errorCode
		res.Body = a.body
	}
	if a.hide {
		if !d.Allowed {
			res.Headers = appendRejection(dst)
		}
		return
	}
	if d.Allowed && !a.ietf {
		if hs, ok := p.headers.buildAllowed(states, rep, res.Reset, dst); ok {
			res.Headers = hs
			return
		}
	}
	var rem [8]int64
	v := headerValues{remaining: rem[:0], ietf: a.ietf, rejected: !d.Allowed, reported: rep, reset: res.Reset}
	for i := range states {
		v.remaining = append(v.remaining, states[i].Remaining)
	}
	if !d.Allowed {
		v.retryAfter = v.reset + jitter(p.jitterMax, a.reg.opts.Rand)
	}
	res.Headers = p.headers.build(&v, dst)
}

// updatePins applies Kong's pin rule to every window: a sliding
// window whose rate is above its limit pins the start of the window in
// which it first was (per namespace, key and window size, a deviation
// listed in docs/kong-compatibility.md; Kong pins per window size for the
// whole node), any other
// evaluation deletes the pin. It returns the start of window rep to use for
// its reset: the pinned one, or the current window's.
func (a *Advanced) updatePins(p *plan, key string, d *ratelimit.Decision, rep int, now time.Time) int64 {
	nowS := now.Unix()
	var repStart int64
	for i := 0; i < d.Len(); i++ {
		s := d.State(i)
		w := p.secs[i]
		start := nowS - floorMod(nowS, w)
		k := pinKey{a.namespace, key, w}
		if !p.fixed && s.Used > float64(s.Limit.Count) {
			start = a.reg.pins.pin(k, start, nowS)
		} else {
			a.reg.pins.unpin(k)
		}
		if i == rep {
			repStart = start
		}
	}
	return repStart
}

// reset computes RateLimit-Reset for a window of w seconds
// that started at start: the seconds left in it, at least 1, and for a
// sliding window whose rate is above its limit, plus the time the excess
// needs to drain, rounded up. Under continuous overload the window start
// stays pinned, so the first term decays to 1.
func reset(p *plan, s *ratelimit.LimitState, w, start int64, now time.Time) int64 {
	base := max(1, w-(now.Unix()-start))
	if p.fixed {
		return base
	}
	limit := float64(s.Limit.Count)
	over := max(0, (s.Used-limit)/limit*float64(w))
	return int64(math.Ceil(float64(base) + over))
}

// jitter returns the extra seconds added to Retry-After: 0
// without jitter, else floor(U*max)+1, an integer in 1..ceil(max).
func jitter(maxJitter float64, rnd func() float64) int64 {
	if maxJitter <= 0 {
		return 0
	}
	return int64(math.Floor(rnd()*maxJitter)) + 1
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
