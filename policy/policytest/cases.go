// Package policytest holds behaviour cases of the rate-limiting-advanced
// engine as plain data, for every adapter to run through its own request
// path: the sluice gateway over HTTP, the Kong plugin through a fake Kong.
// Running the same tables keeps the deliveries from drifting apart.
//
// A case is a plugin config (Kong's JSON), a start time and a timeline of
// requests, each with the identity the adapter must present (client IP,
// consumer, credential, route, service, path, headers) and the expected
// answer (status, body, headers). Adapters translate an Identity into
// their own request form and compare with Check. The engine
// (policy/cases_test.go), the Kong plugin through its fake Kong
// (internal/kongplugin) and the gateway over real sockets
// (internal/gateway) run every case.
package policytest

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// Identity is what an adapter knows about one request.
type Identity struct {
	// IP is the client IP after trusted-proxy processing (Kong's forwarded
	// IP).
	IP string
	// ConsumerID, ConsumerUsername and ConsumerCustomID describe the
	// authenticated consumer; an empty ConsumerID means none.
	ConsumerID       string
	ConsumerUsername string
	ConsumerCustomID string
	// CredentialID is the authenticated credential; empty means none.
	CredentialID string
	// ServiceID and RouteID are the matched entities; empty means none.
	ServiceID string
	RouteID   string
	// Path is the request path without query; empty means "/".
	Path string
	// Headers are request headers, one value each.
	Headers map[string]string
	// Quota is the quota override a business layer found for the request
	// (policy.Request.Quota); nil means none. The gateway presents it
	// through a sluice-dimensions plugin, the Kong plugin through
	// kong.ctx.shared.
	Quota *Quota
}

// Quota is a quota override in Kong's terms: limit and window_size
// arrays of one length (seconds), and window_type when the override names
// one.
type Quota struct {
	Limit      []int64
	WindowSize []int64
	// WindowType is "sliding", "fixed", or empty for the plugin's.
	WindowType string
}

// Limits returns q as a policy.Quota carries it: the limits, and whether
// their algorithm replaces the plugin's window type.
func (q *Quota) Limits() (limits []ratelimit.Limit, windowTypeSet bool) {
	alg := ratelimit.SlidingWindow
	if q.WindowType == "fixed" {
		alg = ratelimit.FixedWindow
	}
	for i := range q.Limit {
		limits = append(limits, ratelimit.Limit{Algorithm: alg, Count: q.Limit[i], Window: time.Duration(q.WindowSize[i]) * time.Second})
	}
	return limits, q.WindowType != ""
}

// Step is one request of a timeline and its expected answer.
type Step struct {
	// At is the time of the request, as an offset from Case.Start.
	At time.Duration
	// Identity is who sends the request.
	Identity Identity
	// Status is the expected rejection status; 0 means the request is
	// allowed (proxied).
	Status int
	// Body is the expected rejection body; empty means not checked.
	Body string
	// Headers are expected response headers (names case-insensitive); an
	// empty value means the header must be absent. Headers not listed are
	// not checked.
	Headers map[string]string
}

// Case is one behaviour case.
type Case struct {
	Name string
	// Config is the rate-limiting-advanced config object, as Kong sends it
	// and as a decK file holds it under config:.
	Config string
	// Start is the wall-clock time of At = 0. It is epoch-aligned to the
	// configured windows unless the case says otherwise.
	Start time.Time
	Steps []Step
}

// Answer is what an adapter observed for one step.
type Answer struct {
	// Status is the rejection status, 0 when the request was allowed.
	Status  int
	Body    string
	Headers http.Header
}

// Check compares an answer with the step and returns the differences, one
// per line; empty when they agree.
func (s *Step) Check(a Answer) string {
	var b strings.Builder
	if a.Status != s.Status {
		fmt.Fprintf(&b, "status = %d, want %d\n", a.Status, s.Status)
	}
	if s.Body != "" && a.Body != s.Body {
		fmt.Fprintf(&b, "body = %q, want %q\n", a.Body, s.Body)
	}
	for name, want := range s.Headers {
		got := a.Headers.Get(name)
		if got != want {
			if want == "" {
				fmt.Fprintf(&b, "header %s = %q, want it absent\n", name, got)
			} else {
				fmt.Fprintf(&b, "header %s = %q, want %q\n", name, got, want)
			}
		}
	}
	return b.String()
}

// t0 is a start time aligned to every window the cases use (a multiple of
// 3600 s).
var t0 = time.Unix(1_767_225_600, 0).UTC() // 2026-01-01T00:00:00Z

const rejected = `{"message":"API rate limit exceeded"}`

func ip(a string) Identity { return Identity{IP: a} }

// tenSeconds returns a quota of 3 per 10 s.
func tenSeconds() *Quota { return &Quota{Limit: []int64{3}, WindowSize: []int64{10}} }

func withQuota(fromIP string, q *Quota) Identity { return Identity{IP: fromIP, Quota: q} }

func consumer(id, fromIP string) Identity {
	return Identity{IP: fromIP, ConsumerID: id, ConsumerUsername: "u-" + id}
}

// AdvancedCases returns the rate-limiting-advanced behaviour cases. Each
// call returns fresh values.
func AdvancedCases() []Case {
	return []Case{
		{
			// Limits 3/5 s and 5/10 s; after the third request the
			// 5 s window is empty, and the 10 s window keeps showing 2 while
			// only read.
			Name:   "two fixed windows, spec example",
			Config: `{"limit": [5, 3], "window_size": [10, 5], "window_type": "fixed", "identifier": "ip", "namespace": "spec"}`,
			Start:  t0,
			Steps: []Step{
				{At: 0, Identity: ip("10.0.0.1"), Headers: map[string]string{"X-RateLimit-Remaining-5": "2", "X-RateLimit-Remaining-10": "4", "RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "5"}},
				{At: time.Second, Identity: ip("10.0.0.1"), Headers: map[string]string{"X-RateLimit-Remaining-5": "1", "RateLimit-Reset": "4"}},
				{At: 2 * time.Second, Identity: ip("10.0.0.1"), Headers: map[string]string{"X-RateLimit-Remaining-5": "0", "X-RateLimit-Remaining-10": "2", "RateLimit-Limit": "3", "RateLimit-Remaining": "0"}},
				{At: 3 * time.Second, Identity: ip("10.0.0.1"), Status: 429, Body: rejected, Headers: map[string]string{"X-RateLimit-Remaining-5": "0", "X-RateLimit-Remaining-10": "2", "RateLimit-Remaining": "0", "Retry-After": "2", "Content-Type": "application/json; charset=utf-8"}},
				// Another client has its own counters.
				{At: 3 * time.Second, Identity: ip("10.0.0.2"), Headers: map[string]string{"X-RateLimit-Remaining-5": "2"}},
				// The next 5 s window.
				{At: 5 * time.Second, Identity: ip("10.0.0.1"), Headers: map[string]string{"X-RateLimit-Remaining-5": "2", "X-RateLimit-Remaining-10": "1", "Retry-After": ""}},
			},
		},
		{
			// An anonymous request under identifier consumer is
			// counted per IP; a consumer is counted apart from its IP.
			Name:   "consumer identifier falls back to the IP",
			Config: `{"limit": [1], "window_size": [60], "window_type": "fixed", "namespace": "fallback"}`,
			Start:  t0,
			Steps: []Step{
				{At: 0, Identity: ip("10.0.0.1")},
				{At: time.Second, Identity: ip("10.0.0.1"), Status: 429, Body: rejected},
				{At: 2 * time.Second, Identity: consumer("c1", "10.0.0.1")},
				{At: 3 * time.Second, Identity: consumer("c1", "10.0.0.9"), Status: 429},
				{At: 4 * time.Second, Identity: Identity{IP: "10.0.0.1", CredentialID: "cred-1"}},
			},
		},
		{
			// Hidden headers, custom status and message.
			Name:   "hidden headers and a custom rejection",
			Config: `{"limit": [1], "window_size": [1], "identifier": "ip", "namespace": "hidden", "hide_client_headers": true, "error_code": 403, "error_message": "slow down"}`,
			Start:  t0,
			Steps: []Step{
				{At: 0, Identity: ip("10.0.0.1"), Headers: map[string]string{"X-RateLimit-Limit-Second": "", "RateLimit-Limit": ""}},
				{At: 100 * time.Millisecond, Identity: ip("10.0.0.1"), Status: 403, Body: `{"message":"slow down"}`, Headers: map[string]string{"Retry-After": "", "X-RateLimit-Remaining-Second": ""}},
			},
		},
		{
			// Header identifier, missing header counts by IP.
			Name:   "header identifier",
			Config: `{"limit": [1], "window_size": [60], "identifier": "header", "header_name": "X-Tenant", "namespace": "hdr"}`,
			Start:  t0,
			Steps: []Step{
				{At: 0, Identity: Identity{IP: "10.0.0.1", Headers: map[string]string{"X-Tenant": "acme"}}},
				{At: time.Second, Identity: Identity{IP: "10.0.0.2", Headers: map[string]string{"X-Tenant": "acme"}}, Status: 429},
				{At: time.Second, Identity: Identity{IP: "10.0.0.1", Headers: map[string]string{"X-Tenant": "other"}}},
				{At: 2 * time.Second, Identity: ip("10.0.0.1")},
				{At: 3 * time.Second, Identity: ip("10.0.0.1"), Status: 429},
			},
		},
		{
			// The path identifier counts only the exact path.
			Name:   "path identifier",
			Config: `{"limit": [1], "window_size": [60], "identifier": "path", "path": "/orders", "namespace": "path"}`,
			Start:  t0,
			Steps: []Step{
				{At: 0, Identity: Identity{IP: "10.0.0.1", Path: "/orders"}},
				{At: time.Second, Identity: Identity{IP: "10.0.0.2", Path: "/orders"}, Status: 429},
				{At: time.Second, Identity: Identity{IP: "10.0.0.2", Path: "/orders/1"}},
			},
		},
		{
			// A compound key with a missing part falls back to
			// the identifier.
			Name:   "compound identifier",
			Config: `{"limit": [1], "window_size": [60], "compound_identifier": ["service", "consumer"], "identifier": "ip", "namespace": "compound"}`,
			Start:  t0,
			Steps: []Step{
				{At: 0, Identity: Identity{IP: "10.0.0.1", ServiceID: "s1", ConsumerID: "c1"}},
				{At: time.Second, Identity: Identity{IP: "10.0.0.2", ServiceID: "s1", ConsumerID: "c1"}, Status: 429},
				{At: time.Second, Identity: Identity{IP: "10.0.0.1", ServiceID: "s2", ConsumerID: "c1"}},
				// No consumer: counted by IP, which has no hits yet.
				{At: 2 * time.Second, Identity: Identity{IP: "10.0.0.3", ServiceID: "s1"}},
				{At: 3 * time.Second, Identity: Identity{IP: "10.0.0.3", ServiceID: "s2"}, Status: 429},
			},
		},
		{
			// A quota override replaces limit and window_size for the
			// requests that carry it (headers name its windows) and keeps
			// the plugin's window type unless it names one; requests
			// without it keep the plugin's limits.
			Name:   "quota override replaces the windows",
			Config: `{"limit": [2], "window_size": [60], "window_type": "fixed", "identifier": "ip", "namespace": "quota"}`,
			Start:  t0,
			Steps: []Step{
				{At: 0, Identity: withQuota("10.0.0.1", tenSeconds()), Headers: map[string]string{"X-RateLimit-Limit-10": "3", "X-RateLimit-Remaining-10": "2", "X-RateLimit-Limit-Minute": "", "RateLimit-Limit": "3"}},
				{At: time.Second, Identity: withQuota("10.0.0.1", tenSeconds()), Headers: map[string]string{"X-RateLimit-Remaining-10": "1"}},
				{At: 2 * time.Second, Identity: withQuota("10.0.0.1", tenSeconds()), Headers: map[string]string{"X-RateLimit-Remaining-10": "0"}},
				{At: 3 * time.Second, Identity: withQuota("10.0.0.1", tenSeconds()), Status: 429, Body: rejected, Headers: map[string]string{"Retry-After": "7", "X-RateLimit-Limit-10": "3"}},
				// The same client without the quota: the plugin's minute.
				{At: 3 * time.Second, Identity: ip("10.0.0.1"), Headers: map[string]string{"X-RateLimit-Limit-Minute": "2", "X-RateLimit-Remaining-Minute": "1", "X-RateLimit-Limit-10": ""}},
				// Fixed like the plugin: the next 10 s window starts empty.
				{At: 10 * time.Second, Identity: withQuota("10.0.0.1", tenSeconds()), Headers: map[string]string{"X-RateLimit-Remaining-10": "2"}},
				// A quota naming its window type, here sliding.
				{At: 10 * time.Second, Identity: withQuota("10.0.0.2", &Quota{Limit: []int64{4}, WindowSize: []int64{3600}, WindowType: "sliding"}), Headers: map[string]string{"X-RateLimit-Limit-Hour": "4", "X-RateLimit-Remaining-Hour": "3", "X-RateLimit-Limit-Minute": ""}},
			},
		},
		{
			// Kong's worked example: 30 s into a 60 s window the previous
			// window weighs 0.5.
			Name:   "sliding window weighs the previous window",
			Config: `{"limit": [10], "window_size": [60], "window_type": "sliding", "identifier": "ip", "namespace": "sliding"}`,
			Start:  t0,
			Steps: append(repeat(10, ip("10.0.0.1"), 0, time.Second),
				// 10 hits in the previous window, 30 s into this one: rate
				// 0 + 10*0.5 + 1 = 6 for this request.
				Step{At: 90 * time.Second, Identity: ip("10.0.0.1"), Headers: map[string]string{"X-RateLimit-Remaining-Minute": "4"}},
			),
		},
	}
}

// repeat returns n allowed steps of one identity, from start, every step.
func repeat(n int, id Identity, start, step time.Duration) []Step {
	s := make([]Step, n)
	for i := range s {
		s[i] = Step{At: start + time.Duration(i)*step, Identity: id}
	}
	return s
}
