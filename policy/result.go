package policy

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// Header is one response header.
type Header struct {
	Name  string
	Value string
}

// A Result is the answer to one Check. Adapters apply it as it is: when
// Allowed, set Headers on the response and proxy the request; otherwise
// respond with Status, Headers and Body. Nothing in it needs deciding again.
type Result struct {
	// Allowed reports whether the request may proceed. In shadow mode it is
	// always true.
	Allowed bool
	// Denied reports whether the policy denied the request: Allowed's
	// opposite, except in shadow mode, where a denial is only reported.
	Denied bool
	// Status is the status of the rejection (error_code, or 500 for a
	// rate-limiting plugin without fault_tolerant whose store failed); 0
	// when Allowed.
	Status int
	// Body is the rejection body, JSON; nil when Allowed. It is shared by
	// every result of one limiter and must not be modified.
	Body []byte
	// Headers are the response headers in the order Kong sets them: per
	// window X-RateLimit-Limit-<name> and X-RateLimit-Remaining-<name>, then
	// RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After
	// when denied, the IETF pair when enabled, and Content-Type on a
	// rejection. Empty when the headers are hidden, in shadow mode and when
	// the store failed.
	Headers []Header
	// Key is the counter key the request was counted under.
	Key string
	// Retries is how many times a throttled request was evaluated again in
	// the waiting room; 0 when it never waited.
	Retries int

	// The window the RateLimit-* headers describe (the one with the fewest
	// remaining requests, on a tie the longest), as numbers, for metrics
	// and shadow reports; set even when headers are hidden or in shadow
	// mode, zero when the store failed.
	Window    time.Duration // the window's length
	Limit     int64         // its limit
	Remaining int64         // requests left in it
	Reset     int64         // RateLimit-Reset, seconds
}

// Header names. Kong's code writes the window names lower case; header
// names are case-insensitive.
const (
	hdrLimitPrefix     = "X-RateLimit-Limit-"
	hdrRemainingPrefix = "X-RateLimit-Remaining-"
	hdrLimit           = "RateLimit-Limit"
	hdrRemaining       = "RateLimit-Remaining"
	hdrReset           = "RateLimit-Reset"
	hdrRetryAfter      = "Retry-After"
	hdrPolicy          = "RateLimit-Policy"
	hdrRateLimit       = "RateLimit"
	hdrContentType     = "Content-Type"
	contentTypeJSON    = "application/json; charset=utf-8"
)

// messageBody returns the exact body of a rejection: {"message":"..."}.
func messageBody(msg string) []byte {
	b, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{msg}) // a struct of one string always marshals
	return b
}

// headerWindow names one window's headers, computed once per limiter.
type headerWindow struct {
	limitName, remainingName string
	// limit is the window's limit, formatted once.
	limit string
	// skip is set when a later window has the same name: Kong's later
	// window overwrites the earlier one's headers, so only one pair is
	// sent, with the later values.
	skip bool
	// ietfName is the window's policy name in the IETF headers.
	ietfName string
}

// headerPlan is the precomputed header layout of one set of windows.
type headerPlan struct {
	windows []headerWindow
	// sent is the number of per-window headers sent (two per window not
	// skipped).
	sent int
	// policy is the IETF RateLimit-Policy value; it depends only on the
	// config.
	policy string
	// allowed is the headers of an allowed request without the IETF pair,
	// the values that vary left empty: build copies it and fills them in.
	allowed []Header
}

func newHeaderPlan(names, titles []string, limits []int64, windowSecs []int64) headerPlan {
	hp := headerPlan{windows: make([]headerWindow, len(names))}
	for i, n := range names {
		title := titles[i]
		hp.windows[i] = headerWindow{limitName: hdrLimitPrefix + title, remainingName: hdrRemainingPrefix + title,
			limit: strconv.FormatInt(limits[i], 10), ietfName: n}
		for j := i + 1; j < len(names); j++ {
			if names[j] == n {
				hp.windows[i].skip = true
			}
		}
		if !hp.windows[i].skip {
			hp.sent += 2
		}
	}
	var b []byte
	first := true
	for i := range hp.windows {
		if hp.windows[i].skip {
			continue
		}
		if !first {
			b = append(b, ", "...)
		}
		first = false
		b = append(b, '"')
		b = append(b, hp.windows[i].ietfName...)
		b = append(b, `";q=`...)
		b = strconv.AppendInt(b, limits[i], 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, windowSecs[i], 10)
	}
	hp.policy = string(b)
	for i := range hp.windows {
		if w := &hp.windows[i]; !w.skip {
			hp.allowed = append(hp.allowed, Header{w.limitName, w.limit}, Header{Name: w.remainingName})
		}
	}
	hp.allowed = append(hp.allowed, Header{Name: hdrLimit}, Header{Name: hdrRemaining}, Header{Name: hdrReset})
	return hp
}

// headerValues is what one response's headers say.
type headerValues struct {
	remaining  []int64 // per window, in plan order
	reported   int     // index of the window the RateLimit-* headers describe
	reset      int64   // RateLimit-Reset, seconds
	retryAfter int64   // Retry-After when > 0 (only on denials)
	ietf       bool
	rejected   bool
}

// values hands out header values: cached decimals, or for the rest the
// next piece of one string that build formats them into, in order.
type values struct {
	rest string
	off  int
}

func (vs *values) next(n int64) string {
	if uint64(n) < decimalCached {
		return decimal(n)
	}
	end := vs.off + decimalLen(n)
	s := vs.rest[vs.off:end]
	vs.off = end
	return s
}

// appendUncached appends n in decimal unless it is cached.
func appendUncached(buf []byte, n int64) []byte {
	if uint64(n) < decimalCached {
		return buf
	}
	return strconv.AppendInt(buf, n, 10)
}

// decimalLen is the length of n in decimal.
func decimalLen(n int64) int {
	l := 1
	if n < 0 {
		l++
		n = -n // min int64 never reaches a header
	}
	for n >= 10 {
		n /= 10
		l++
	}
	return l
}

// build appends the headers of one response to dst. It allocates the
// header slice when dst lacks room, plus one string when a value is out of
// the decimal cache's range (2^18 or more) or the IETF headers are on.
func (hp *headerPlan) build(v *headerValues, dst []Header) []Header {
	n := hp.sent + 3
	if v.retryAfter > 0 {
		n++
	}
	if v.ietf {
		n += 2
	}
	if v.rejected {
		n++
	}
	remaining := v.remaining[v.reported]
	hs := grow(dst, n)
	var vs values
	if v.ietf || !hp.cached(v) {
		// The values out of the cache's range, in header order, then the
		// IETF value, into one string.
		var arr [128]byte
		buf := arr[:0]
		for i := range hp.windows {
			if !hp.windows[i].skip {
				buf = appendUncached(buf, v.remaining[i])
			}
		}
		buf = appendUncached(buf, remaining)
		buf = appendUncached(buf, v.reset)
		buf = appendUncached(buf, v.retryAfter)
		if v.ietf {
			buf = append(buf, '"')
			buf = append(buf, hp.windows[v.reported].ietfName...)
			buf = append(buf, `";r=`...)
			buf = strconv.AppendInt(buf, remaining, 10)
			buf = append(buf, ";t="...)
			buf = strconv.AppendInt(buf, v.reset, 10)
		}
		vs.rest = string(buf)
	}

	for i := range hp.windows {
		w := &hp.windows[i]
		if !w.skip {
			hs = append(hs, Header{w.limitName, w.limit}, Header{w.remainingName, vs.next(v.remaining[i])})
		}
	}
	hs = append(hs, Header{hdrLimit, hp.windows[v.reported].limit}, Header{hdrRemaining, vs.next(remaining)}, Header{hdrReset, vs.next(v.reset)})
	if v.retryAfter > 0 {
		hs = append(hs, Header{hdrRetryAfter, vs.next(v.retryAfter)})
	}
	if v.ietf {
		hs = append(hs, Header{hdrPolicy, hp.policy}, Header{hdrRateLimit, vs.rest[vs.off:]})
	}
	if v.rejected {
		hs = append(hs, Header{hdrContentType, contentTypeJSON})
	}
	return hs
}

// buildAllowed is build for the usual case, an allowed request without the
// IETF headers, straight from the decision's states: a copy of the
// template and a value per window plus two. It reports false, doing
// nothing, when a value is out of the decimal cache's range.
func (hp *headerPlan) buildAllowed(states []ratelimit.LimitState, rep int, reset int64, dst []Header) ([]Header, bool) {
	big := uint64(reset)
	for i := range states {
		big |= uint64(states[i].Remaining)
	}
	if big >= decimalCached || len(states) != len(hp.windows) {
		return nil, false
	}
	hs := append(dst, hp.allowed...)
	out := hs[len(dst):]
	k := 1
	for i := range hp.windows {
		if !hp.windows[i].skip {
			out[k].Value = decimal(states[i].Remaining)
			k += 2
		}
	}
	out[k-1].Value = hp.windows[rep].limit
	out[k].Value = decimal(states[rep].Remaining)
	out[k+1].Value = decimal(reset)
	return hs, true
}

// cached reports whether every number of v is in the decimal cache's
// range.
func (hp *headerPlan) cached(v *headerValues) bool {
	big := uint64(v.reset) | uint64(v.retryAfter)
	for _, r := range v.remaining {
		big |= uint64(r)
	}
	return big < decimalCached
}

// grow returns dst with room for n more headers, allocating exactly once
// when it lacks it.
func grow(dst []Header, n int) []Header {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	nd := make([]Header, len(dst), len(dst)+n)
	copy(nd, dst)
	return nd
}

// appendRejection appends the only header of a rejection whose rate-limit
// headers are hidden.
func appendRejection(dst []Header) []Header {
	return append(grow(dst, 1), Header{hdrContentType, contentTypeJSON})
}
