package policy

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// Scope is the scope of a rate-limiting plugin instance: the route and
// service it is attached to, empty when it is not. The OSS plugin's
// counters belong to a scope: a global instance shares one
// counter per identifier across all services.
type Scope struct {
	RouteID   string
	ServiceID string
}

// nullID is how Kong writes an unset scope in counter keys.
const nullID = "00000000-0000-0000-0000-000000000000"

// basicNamespace is the store namespace of every rate-limiting instance:
// the scope is part of the key instead, as in Kong's shared dictionary.
// It contains '|', which RLA namespaces may not, so the two never meet.
const basicNamespace = "|rate-limiting"

// Basic is a compiled OSS rate-limiting plugin instance, made by NewBasic
// (the zero value is not usable). It is safe for concurrent use.
type Basic struct {
	closed   atomic.Bool
	reg      *Registry
	storeKey storeKey
	store    ratelimit.Store
	scope    [2]string
	keys     keySpec
	policy   string

	// short holds the second..day periods, decided together in one store
	// call; calendar holds month and year, each decided in its own call
	// (see Check).
	short     []period
	shortLims []ratelimit.Limit
	calendar  []period
	all       []period
	headers   headerPlan

	faultTolerant bool
	hide          bool
	ietf          bool
	shadow        bool
	errorCode     int
	body          []byte

	// For Info and Top (inspect.go).
	syncRate float64
	top      *TopKeys
	topID    string
}

// failureBody is Kong's message when the store fails and fault_tolerant
// is off.
var failureBody = messageBody("An unexpected error occurred")

// NewBasic compiles cfg for an instance of the given scope. Empty scope
// ids default to cfg's Kong-added route_id and service_id, so a Kong
// plugin adapter may pass the zero Scope.
func NewBasic(cfg *BasicConfig, scope Scope, reg *Registry) (*Basic, error) {
	c := *cfg
	d := &decoder{}
	validateBasic(d, &c)
	if c.ErrorCode < 100 || c.ErrorCode > 999 {
		d.fail(pathConfig+".error_code", "error_code must be a whole HTTP status between 100 and 999")
	}
	if len(d.errs) > 0 {
		return nil, &ValidationError{Errors: d.errs}
	}
	if scope.RouteID == "" {
		scope.RouteID = c.Kong.RouteID
	}
	if scope.ServiceID == "" {
		scope.ServiceID = c.Kong.ServiceID
	}
	b := &Basic{
		reg:           reg,
		scope:         [2]string{orNull(scope.RouteID), orNull(scope.ServiceID)},
		keys:          keySpec{id: c.LimitBy, headerName: deref(c.HeaderName), path: deref(c.Path)},
		policy:        c.Policy,
		faultTolerant: c.FaultTolerant,
		hide:          c.HideClientHeaders,
		ietf:          c.Sluice.IETFHeaders,
		shadow:        c.Sluice.Shadow,
		errorCode:     int(c.ErrorCode),
		body:          messageBody(c.ErrorMessage),
	}
	b.all = c.periods()
	names, titles := make([]string, len(b.all)), make([]string, len(b.all))
	limits, secs := make([]int64, len(b.all)), make([]int64, len(b.all))
	var windows []time.Duration
	for i, p := range b.all {
		names[i], titles[i], limits[i], secs[i] = p.name, p.title, p.limit, int64(p.len/time.Second)
		windows = append(windows, p.len)
		if p.name == "month" || p.name == "year" {
			b.calendar = append(b.calendar, p)
			continue
		}
		b.short = append(b.short, p)
		b.shortLims = append(b.shortLims, ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Count: p.limit, Window: p.len})
	}
	b.headers = newHeaderPlan(names, titles, limits, secs)
	var err error
	rc := c.Redis.redisConfig()
	// The OSS plugin's sync_rate -1 sends every request to Redis: the
	// store's synchronous mode (0); a positive value batches.
	syncRate := c.SyncRate
	if syncRate < 0 {
		syncRate = 0
	}
	// As in Kong, a Redis call waits up to the record's timeout, and
	// without fault_tolerant a Redis that does not answer fails the
	// request (Basic.failed) rather than being counted locally.
	var timeout time.Duration
	if rc.SendTimeout != nil && rc.ReadTimeout != nil {
		timeout = time.Duration(max(*rc.SendTimeout, *rc.ReadTimeout)) * time.Millisecond
	}
	b.storeKey, b.store, err = reg.storeFor(c.Policy, RedisStoreConfig{
		Namespace: basicNamespace, Redis: rc, SyncRate: syncRate, Windows: windows,
		Strict: !c.FaultTolerant, Timeout: timeout,
	})
	if err != nil {
		return nil, fmt.Errorf("policy: building %s store for rate-limiting: %w", c.Policy, err)
	}
	b.syncRate = c.SyncRate
	b.topID = "rate-limiting|" + b.scope[0] + "|" + b.scope[1]
	b.top = reg.topFor(b.topID)
	return b, nil
}

func orNull(id string) string {
	if id == "" {
		return nullID
	}
	return id
}

// Close gives back the limiter's reference on its store; Close is
// idempotent.
func (b *Basic) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.reg.releaseTop(b.topID)
	return b.reg.release(b.storeKey)
}

// calendarStart returns the start of the UTC calendar month or year that
// holds now.
func calendarStart(name string, now time.Time) time.Time {
	u := now.UTC()
	if name == "year" {
		return time.Date(u.Year(), time.January, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// Check decides r as the OSS plugin does: allowed iff every
// period's count before this request is below its limit; an allowed
// request is counted in every period. With the local policy a denied
// request is counted nowhere; with redis it is counted in every period
// (Kong increments first).
//
// Periods from second to day are UTC-aligned fixed windows decided in one
// store call. Month and year are calendar periods (a month starts on the
// 1st at 00:00 UTC), each kept in a counter of its own keyed by its start.
// With the local policy they are read before the shorter periods are
// counted and counted after, so a request rejected anywhere is counted
// nowhere; two concurrent requests may both pass that read, as in Kong,
// which also reads before it counts.
//
// A store failure with fault_tolerant set admits the request without
// headers and returns the error for logging; without fault_tolerant the
// Result is a 500 with Kong's message, and the error is returned too.
func (b *Basic) Check(ctx context.Context, r *Request) (Result, error) {
	return b.CheckAppend(ctx, r, nil)
}

// CheckAppend is Check with the headers appended to dst, which the caller
// may reuse from request to request (Result.Headers then aliases it).
func (b *Basic) CheckAppend(ctx context.Context, r *Request, dst []Header) (Result, error) {
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	id := b.keys.key(r)
	key := ratelimit.Key(b.scope[0], b.scope[1], id)
	// Kong's redis policy with sync_rate -1 counts rejections (its read is
	// an INCR); with a positive sync_rate it reads its local copy and, as
	// the local policy, counts only admitted requests.
	counts := b.policy == StrategyRedis && b.syncRate < 0

	// usage[i] is period i's count before this request, as Kong reads it.
	var usage [6]int64
	denied := -1
	short := len(b.short)
	var cal [2]calendarCounter
	for i, p := range b.calendar {
		cal[i] = b.calendarCounter(p, id, now)
	}

	// Local policy: a calendar period already exhausted rejects the request
	// before anything is counted.
	if !counts {
		for i, c := range cal[:len(b.calendar)] {
			u, err := b.read(ctx, c.key, c.limit, c.now)
			if err != nil {
				return b.failed(key, err, dst)
			}
			usage[short+i] = u
			if u >= c.limit.Count && denied < 0 {
				denied = short + i
			}
		}
	}

	if short > 0 {
		if denied >= 0 {
			for i, l := range b.shortLims {
				u, err := b.read(ctx, key, l, now)
				if err != nil {
					return b.failed(key, err, dst)
				}
				usage[i] = u
			}
		} else {
			d, err := b.store.Take(ctx, ratelimit.Request{Key: key, Limits: b.shortLims, Now: now, Penalty: counts})
			if err != nil {
				return b.failed(key, err, dst)
			}
			if !d.Allowed {
				denied = d.Denied
			}
			for i := 0; i < d.Len(); i++ {
				if denied < 0 || i <= denied {
					usage[i] = int64(d.State(i).Used) - 1 // Used includes this request
					continue
				}
				// After the denial: Kong reads (local) or counts (redis) each
				// period on its own.
				var u int64
				if counts {
					u, _, err = b.count(ctx, key, b.shortLims[i], now, true)
				} else {
					u, err = b.read(ctx, key, b.shortLims[i], now)
				}
				if err != nil {
					return b.failed(key, err, dst)
				}
				usage[i] = u
			}
		}
	}

	for i, c := range cal[:len(b.calendar)] {
		if !counts && denied >= 0 {
			break // read above; a rejected request is not counted
		}
		u, ok, err := b.count(ctx, c.key, c.limit, c.now, counts)
		if err != nil {
			return b.failed(key, err, dst)
		}
		usage[short+i] = u
		if !ok && denied < 0 {
			denied = short + i
		}
	}
	res := b.result(key, usage[:len(b.all)], denied, now, dst)
	b.top.Record(now, id, res.Denied)
	return res, nil
}

// calendarCounter is the counter of one calendar period of one client.
type calendarCounter struct {
	key   string
	limit ratelimit.Limit
	now   time.Time
}

// calendarCounter returns where the counter of calendar period p lives.
// It is keyed by the period's start and decided at that instant: its store
// window (longer than any calendar period) then never rolls over while the
// period lasts. The store must decide with the caller's clock for this.
func (b *Basic) calendarCounter(p period, id string, now time.Time) calendarCounter {
	start := calendarStart(p.name, now)
	return calendarCounter{
		key:   ratelimit.Key(b.scope[0], b.scope[1], id, p.name, strconv.FormatInt(start.Unix(), 10)),
		limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Count: p.limit, Window: calendarWindow(p.name)},
		now:   start,
	}
}

// read returns the count of one fixed-window limit without changing it: a
// Take whose cost exceeds the limit can never pass and, without penalty,
// is never kept; it reports the count plus that cost.
func (b *Basic) read(ctx context.Context, key string, l ratelimit.Limit, now time.Time) (int64, error) {
	d, err := b.store.Take(ctx, ratelimit.Request{Key: key, Limits: []ratelimit.Limit{l}, Cost: l.Count + 1, Now: now})
	if err != nil {
		return 0, err
	}
	return int64(d.State(0).Used) - l.Count - 1, nil
}

// count counts one request in one fixed-window limit (kept even when over
// the limit when keep is set) and returns the count before it and whether
// it fitted.
func (b *Basic) count(ctx context.Context, key string, l ratelimit.Limit, now time.Time, keep bool) (int64, bool, error) {
	d, err := b.store.Take(ctx, ratelimit.Request{Key: key, Limits: []ratelimit.Limit{l}, Now: now, Penalty: keep})
	if err != nil {
		return 0, false, err
	}
	return int64(d.State(0).Used) - 1, d.Allowed, nil
}

// calendarWindow is the store window of a calendar period: longer than any
// month (or year), so that decided at the period's start it never rolls
// over, and short enough that the counter expires soon after the period.
func calendarWindow(name string) time.Duration {
	if name == "year" {
		return 367 * 24 * time.Hour
	}
	return 32 * 24 * time.Hour
}

// failed is the result of a store failure.
func (b *Basic) failed(key string, err error, dst []Header) (Result, error) {
	err = fmt.Errorf("policy: checking rate-limiting counters: %w", err)
	if b.faultTolerant || b.shadow {
		return Result{Allowed: true, Key: key}, err
	}
	return Result{Denied: true, Status: 500, Body: failureBody, Key: key, Headers: appendRejection(dst)}, err
}

// result builds the OSS response.
func (b *Basic) result(key string, usage []int64, denied int, now time.Time, dst []Header) Result {
	res := Result{Allowed: denied < 0, Denied: denied >= 0, Key: key}
	var rem [6]int64
	v := headerValues{remaining: rem[:len(usage)], ietf: b.ietf, rejected: res.Denied}
	for i, u := range usage {
		r := b.all[i].limit - u
		if denied < 0 || i == denied {
			r-- // this request
		}
		rem[i] = max(0, r)
		// Smallest remaining; on a tie the longer period (later index).
		if i == 0 || rem[i] <= rem[v.reported] {
			v.reported = i
		}
	}
	p := b.all[v.reported]
	var start time.Time
	if p.name == "month" || p.name == "year" {
		start = calendarStart(p.name, now)
	} else {
		secs := int64(p.len / time.Second)
		start = time.Unix(now.Unix()-floorMod(now.Unix(), secs), 0)
	}
	v.reset = max(1, int64(p.len/time.Second)-int64(now.Sub(start)/time.Second))
	res.Window, res.Limit, res.Remaining, res.Reset = p.len, p.limit, rem[v.reported], v.reset
	if b.shadow {
		res.Allowed = true
		return res
	}
	if res.Denied {
		res.Status = b.errorCode
		res.Body = b.body
	}
	if b.hide {
		if res.Denied {
			res.Headers = appendRejection(dst)
		}
		return res
	}
	if res.Denied {
		v.retryAfter = v.reset
	}
	res.Headers = b.headers.build(&v, dst)
	return res
}
