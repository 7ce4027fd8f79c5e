package policy

import (
	"encoding/json"
	"strconv"
	"time"
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

// window is one evaluated window as the headers show it.
type window struct {
	limit     int64
	remaining int64
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
	return hp
}

// headerValues is what one response's headers say.
type headerValues struct {
	windows    []window // per window, in plan order
	reported   int      // index of the window the RateLimit-* headers describe
	reset      int64    // RateLimit-Reset, seconds
	retryAfter int64    // Retry-After when > 0 (only on denials)
	ietf       bool
	rejected   bool
}

// smallInts holds the decimal forms of 0..smallMax-1 in one string, so the
// usual header values (remaining counts, seconds to reset) need neither
// formatting nor allocation. It is built once and never changes.
const smallMax = 4096

var smallInts, smallEnds = func() (string, [smallMax + 1]uint16) {
	var ends [smallMax + 1]uint16
	var b []byte
	for i := range smallMax {
		b = strconv.AppendInt(b, int64(i), 10)
		ends[i+1] = uint16(len(b))
	}
	return string(b), ends
}()

// valueRef is a header value: s when ready, else buf[from:to] of the
// values' buffer.
type valueRef struct {
	s        string
	from, to int
}

// appendValue records n: small numbers come from smallInts, others are
// written into buf, which becomes one string once every value is in.
func appendValue(refs []valueRef, buf []byte, n int64) ([]valueRef, []byte) {
	if n >= 0 && n < smallMax {
		return append(refs, valueRef{s: smallInts[smallEnds[n]:smallEnds[n+1]]}), buf
	}
	from := len(buf)
	buf = strconv.AppendInt(buf, n, 10)
	return append(refs, valueRef{from: from, to: len(buf)}), buf
}

func appendIETF(refs []valueRef, buf []byte, name string, remaining, reset int64) ([]valueRef, []byte) {
	from := len(buf)
	buf = append(buf, '"')
	buf = append(buf, name...)
	buf = append(buf, `";r=`...)
	buf = strconv.AppendInt(buf, remaining, 10)
	buf = append(buf, ";t="...)
	buf = strconv.AppendInt(buf, reset, 10)
	return append(refs, valueRef{from: from, to: len(buf)}), buf
}

// build appends the headers of one response to dst. It allocates the
// header slice when dst lacks room, plus one string when a value is at
// least smallMax or the IETF headers are on. Windows beyond what valueBuf holds (never with Kong-sized
// configs) are formatted one string each.
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
	hs := grow(dst, n)
	var refArr [24]valueRef
	if hp.sent+4 > len(refArr) {
		return hp.buildSlow(v, hs)
	}
	var arr [192]byte
	refs, buf := refArr[:0], arr[:0]
	for i := range hp.windows {
		if !hp.windows[i].skip {
			refs, buf = appendValue(refs, buf, v.windows[i].remaining)
		}
	}
	rep := v.windows[v.reported]
	refs, buf = appendValue(refs, buf, rep.remaining)
	refs, buf = appendValue(refs, buf, v.reset)
	if v.retryAfter > 0 {
		refs, buf = appendValue(refs, buf, v.retryAfter)
	}
	if v.ietf {
		refs, buf = appendIETF(refs, buf, hp.windows[v.reported].ietfName, rep.remaining, v.reset)
	}
	if len(buf) > 0 {
		// One string for every value that was not small.
		all := string(buf)
		for i := range refs {
			if refs[i].s == "" {
				refs[i].s = all[refs[i].from:refs[i].to]
			}
		}
	}
	k := 0
	for i := range hp.windows {
		w := &hp.windows[i]
		if !w.skip {
			hs = append(hs, Header{w.limitName, w.limit}, Header{w.remainingName, refs[k].s})
			k++
		}
	}
	hs = append(hs, Header{hdrLimit, hp.windows[v.reported].limit}, Header{hdrRemaining, refs[k].s}, Header{hdrReset, refs[k+1].s})
	k += 2
	if v.retryAfter > 0 {
		hs = append(hs, Header{hdrRetryAfter, refs[k].s})
		k++
	}
	if v.ietf {
		hs = append(hs, Header{hdrPolicy, hp.policy}, Header{hdrRateLimit, refs[k].s})
	}
	if v.rejected {
		hs = append(hs, Header{hdrContentType, contentTypeJSON})
	}
	return hs
}

func (hp *headerPlan) buildSlow(v *headerValues, hs []Header) []Header {
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	for i := range hp.windows {
		if hp.windows[i].skip {
			continue
		}
		hs = append(hs, Header{hp.windows[i].limitName, itoa(v.windows[i].limit)}, Header{hp.windows[i].remainingName, itoa(v.windows[i].remaining)})
	}
	rep := v.windows[v.reported]
	hs = append(hs, Header{hdrLimit, itoa(rep.limit)}, Header{hdrRemaining, itoa(rep.remaining)}, Header{hdrReset, itoa(v.reset)})
	if v.retryAfter > 0 {
		hs = append(hs, Header{hdrRetryAfter, itoa(v.retryAfter)})
	}
	if v.ietf {
		hs = append(hs, Header{hdrPolicy, hp.policy},
			Header{hdrRateLimit, `"` + hp.windows[v.reported].ietfName + `";r=` + itoa(rep.remaining) + ";t=" + itoa(v.reset)})
	}
	if v.rejected {
		hs = append(hs, Header{hdrContentType, contentTypeJSON})
	}
	return hs
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
