package decision

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/adminhttp"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/ratelimit"
)

// Seeing and controlling who is limited (docs/decision-service.md): the
// counter of one request descriptor, resetting it, and the heaviest
// descriptors of the last minute per domain.

// DescriptorEntry is one entry of a request descriptor.
type DescriptorEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Counter is the counter of one request descriptor.
type Counter struct {
	Domain     string               `json:"domain"`
	Descriptor []DescriptorEntry    `json:"descriptor"`
	CounterKey string               `json:"counter_key"`
	Rule       string               `json:"rule,omitempty"`
	Shadow     bool                 `json:"shadow,omitempty"`
	Windows    []policy.WindowState `json:"windows"`
}

// ErrNoRule is returned when no rule of the domain applies to a
// descriptor (or the domain is unknown): nothing is counted for it.
var ErrNoRule = errors.New("decision: no rate limit applies to the descriptor")

// descriptorOf builds a request descriptor from entries.
func descriptorOf(entries []DescriptorEntry) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	return d
}

// counted returns the rule that counts entries in domain and its store
// key, or ErrNoRule.
func (s *Service) counted(domain string, entries []DescriptorEntry) (*generation, *rule, string, error) {
	g := s.gen.Load()
	if g.cfg == nil {
		return nil, nil, "", ErrNoConfig
	}
	tree := g.domains[domain]
	d := descriptorOf(entries)
	var n *node
	if tree != nil {
		n = tree.lookup(len(d.Entries), func(i int) (string, string) { return d.Entries[i].GetKey(), d.Entries[i].GetValue() })
	}
	switch {
	case tree == nil:
		return nil, nil, "", fmt.Errorf("%w: the configuration has no domain %q", ErrNoRule, domain)
	case n == nil:
		return nil, nil, "", fmt.Errorf("%w: no descriptor of domain %q matches it", ErrNoRule, domain)
	case n.rule.unlimited || len(n.rule.limits) == 0:
		return nil, nil, "", fmt.Errorf("%w: its descriptor in domain %q is unlimited", ErrNoRule, domain)
	}
	return g, n.rule, g.storeKey(domain, d, n), nil
}

// Counter reads the counter of a request descriptor in domain at now,
// where the store keeps it (Redis for the redis store), counting nothing.
// found is false when it holds nothing.
func (s *Service) Counter(ctx context.Context, domain string, entries []DescriptorEntry, now time.Time) (c Counter, found bool, err error) {
	g, r, key, err := s.counted(domain, entries)
	if err != nil {
		return Counter{}, false, err
	}
	in, ok := g.store.(ratelimit.Inspector)
	if !ok {
		return Counter{}, false, policy.ErrNotInspectable
	}
	cs, err := in.Inspect(ctx, ratelimit.Request{Key: key, Limits: r.limits, Now: now})
	if err != nil {
		return Counter{}, false, fmt.Errorf("decision: inspecting the store: %w", err)
	}
	c = Counter{Domain: domain, Descriptor: entries, CounterKey: key, Rule: r.name, Shadow: r.shadow,
		Windows: policy.WindowStates(cs, nil, now)}
	return c, heldAny(cs, now), nil
}

// Reset clears every window of a request descriptor in domain; in Redis,
// for every decision service sharing it. held reports whether the store
// held a count for it, as Counter reads it; the reset is sent either way.
func (s *Service) Reset(ctx context.Context, domain string, entries []DescriptorEntry, now time.Time) (held bool, err error) {
	g, r, key, err := s.counted(domain, entries)
	if err != nil {
		return false, err
	}
	in, ok := g.store.(ratelimit.Inspector)
	if !ok {
		return false, policy.ErrNotInspectable
	}
	// As policy.ResetCounter: a failed read says nothing, so held.
	held = true
	if cs, err := in.Inspect(ctx, ratelimit.Request{Key: key, Limits: r.limits, Now: now}); err == nil {
		held = heldAny(cs, now)
	}
	if err := in.Reset(ctx, ratelimit.Request{Key: key, Limits: r.limits, Now: now}); err != nil {
		s.log.Error("decision: resetting a counter failed", "domain", domain, "counter_key", key, "err", err)
		return held, fmt.Errorf("decision: resetting the counter: %w", err)
	}
	s.log.Info("decision: counter reset", "domain", domain, "descriptor", topIdentifier(descriptorOf(entries)), "held", held)
	return held, nil
}

// topIdentifier names a descriptor in a top list as the query of its
// counter: "key=remote_address&value=10.0.0.1".
func topIdentifier(d *rlpb.RateLimitDescriptor) string {
	var b strings.Builder
	for i, e := range d.GetEntries() {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString("key=")
		b.WriteString(url.QueryEscape(e.GetKey()))
		b.WriteString("&value=")
		b.WriteString(url.QueryEscape(e.GetValue()))
	}
	return b.String()
}

// topOf returns the sketch of a domain, made on first use.
func (s *Service) topOf(domain string) *policy.TopKeys {
	if s.topK < 0 {
		return nil
	}
	if t, ok := s.tops.Load(domain); ok {
		return t.(*policy.TopKeys)
	}
	t, _ := s.tops.LoadOrStore(domain, policy.NewTopKeys(s.topK))
	return t.(*policy.TopKeys)
}

// recordTop counts one decision of a descriptor in its domain's top list.
func (s *Service) recordTop(domain string, d *rlpb.RateLimitDescriptor, denied bool, now time.Time) {
	if t := s.topOf(domain); t != nil {
		t.RecordFunc(now, denied, func() string { return topIdentifier(d) })
	}
}

// TopList is the top list of one domain.
type TopList struct {
	Domain  string            `json:"domain"`
	By      string            `json:"by"`
	Entries []policy.TopEntry `json:"top"`
}

// Top returns the n heaviest descriptors of the last minute of domain, or
// of every domain of the configuration when domain is "".
func (s *Service) Top(domain string, by policy.TopBy, n int, now time.Time) []TopList {
	byName := "requests"
	if by == policy.TopByDenied {
		byName = "denied"
	}
	var domains []string
	if domain != "" {
		domains = []string{domain}
	} else if g := s.gen.Load(); g.cfg != nil {
		for _, d := range g.cfg.Domains {
			domains = append(domains, d.Name)
		}
	}
	out := []TopList{}
	for _, d := range domains {
		var entries []policy.TopEntry
		if t, ok := s.tops.Load(d); ok {
			entries = t.(*policy.TopKeys).Top(now, by, n)
		}
		if entries == nil {
			entries = []policy.TopEntry{}
		}
		out = append(out, TopList{Domain: d, By: byName, Entries: entries})
	}
	return out
}

// descriptorQuery reads domain and the descriptor's entries from the
// query: key and value repeated in order, key=k1&value=v1&key=k2&value=v2.
func descriptorQuery(q url.Values) (string, []DescriptorEntry, error) {
	if err := adminhttp.UnknownQuery(q, "domain", "key", "value"); err != nil {
		return "", nil, err
	}
	domain := q.Get("domain")
	if domain == "" {
		return "", nil, &adminhttp.QueryError{Param: "domain", Message: "required"}
	}
	keys, values := q["key"], q["value"]
	if len(keys) == 0 || len(keys) != len(values) {
		return "", nil, &adminhttp.QueryError{Param: "key", Message: "want key and value repeated, one value per key, at least one key"}
	}
	entries := make([]DescriptorEntry, len(keys))
	for i := range keys {
		entries[i] = DescriptorEntry{keys[i], values[i]}
	}
	return domain, entries, nil
}

func (s *Service) inspectError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNoRule), errors.Is(err, ErrNoConfig):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, policy.ErrNotInspectable):
		writeError(w, http.StatusNotImplemented, err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
}

func (s *Service) serveCounter(w http.ResponseWriter, r *http.Request) {
	domain, entries, err := descriptorQuery(r.URL.Query())
	if err != nil {
		writeJSONValue(w, http.StatusBadRequest, adminhttp.ErrorBody("error", err))
		return
	}
	c, found, err := s.Counter(r.Context(), domain, entries, s.now())
	if err != nil {
		s.inspectError(w, err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, "decision: no counter for the descriptor")
		return
	}
	writeJSONValue(w, http.StatusOK, c)
}

func (s *Service) serveReset(w http.ResponseWriter, r *http.Request) {
	if !adminauth.SameOrigin(r) {
		writeError(w, http.StatusForbidden, "decision: cross-origin calls that change state are refused")
		return
	}
	domain, entries, err := descriptorQuery(r.URL.Query())
	if err != nil {
		writeJSONValue(w, http.StatusBadRequest, adminhttp.ErrorBody("error", err))
		return
	}
	held, err := s.Reset(r.Context(), domain, entries, s.now())
	if err != nil {
		outcome := "error"
		if errors.Is(err, ErrNoRule) || errors.Is(err, ErrNoConfig) {
			outcome = "not_found"
		}
		s.m.adminActions.WithLabelValues("reset_counter", outcome).Inc()
		s.inspectError(w, err)
		return
	}
	if !held {
		s.m.adminActions.WithLabelValues("reset_counter", "not_found").Inc()
		writeError(w, http.StatusNotFound, "decision: no counter for the descriptor; nothing was reset")
		return
	}
	s.m.adminActions.WithLabelValues("reset_counter", "ok").Inc()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) serveTop(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	by, _, n, err := adminhttp.TopQuery(q, "domain")
	if err != nil {
		writeJSONValue(w, http.StatusBadRequest, adminhttp.ErrorBody("error", err))
		return
	}
	if d := q.Get("domain"); d != "" && !s.hasDomain(d) {
		writeError(w, http.StatusNotFound, "domain: "+strconv.Quote(d)+" is not a configured domain")
		return
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"data": s.Top(q.Get("domain"), by, n, s.now())})
}

// hasDomain reports whether the configuration in use has domain.
func (s *Service) hasDomain(domain string) bool {
	_, ok := s.gen.Load().domains[domain]
	return ok
}

// heldAny reports whether any of cs holds something that affects a
// decision at now (a count, a bucket not full).
func heldAny(cs []ratelimit.CounterState, now time.Time) bool {
	for i := range cs {
		if !cs[i].Empty(now) {
			return true
		}
	}
	return false
}
