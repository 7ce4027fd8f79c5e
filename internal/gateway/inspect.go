package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/internal/gateway/router"
	"github.com/seed-008287da/sluice/policy"
)

// The counters API (docs/admin-api.md): the rate-limiting instances of
// the serving configuration, one identifier's counter, resetting it, what
// a request would get, and the heaviest identifiers. The rules are
// policy's; the gateway finds the instances and builds their requests.

// ErrNoPlugin is returned when no rate-limiting instance has the id or
// instance_name asked for.
var ErrNoPlugin = errors.New("no rate-limiting plugin with that id or instance_name")

// inspectable is what the rate-limiting plugins (policy.Advanced,
// policy.Basic and policy.Concurrency) offer.
type inspectable interface {
	Info() policy.Info
	Counter(ctx context.Context, identifier string, now time.Time) (policy.Counter, error)
	Reset(ctx context.Context, identifier string, now time.Time) error
	Explain(ctx context.Context, r *policy.Request) (policy.Explanation, error)
	Top(now time.Time, by policy.TopBy, n int) []policy.TopEntry
}

// inspected is a plugin that has an inspectable policy and builds its
// policy request from an exchange.
type inspected interface {
	inspectable() inspectable
	request(x *Exchange) *policy.Request
}

func (rl *rateLimiting) inspectable() inspectable {
	if in, ok := rl.c.(inspectable); ok {
		return in
	}
	return nil
}

func (p *concurrency) inspectable() inspectable { return p.c }

// Entity names a route, service, consumer or consumer group.
type Entity struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// PluginScope is what a plugin instance is attached to; all empty for a
// global one.
type PluginScope struct {
	Service       *Entity `json:"service,omitempty"`
	Route         *Entity `json:"route,omitempty"`
	Consumer      *Entity `json:"consumer,omitempty"`
	ConsumerGroup *Entity `json:"consumer_group,omitempty"`
	// Global is true when the instance has no scope.
	Global bool `json:"global"`
}

// RateLimitPlugin describes one rate-limiting, rate-limiting-advanced or
// sluice-concurrency instance of the serving configuration.
type RateLimitPlugin struct {
	ID           string      `json:"id"`
	Name         string      `json:"name"`
	InstanceName string      `json:"instance_name,omitempty"`
	Scope        PluginScope `json:"scope"`
	policy.Info
}

func scopeOf(p *kongconf.Plugin) PluginScope {
	var s PluginScope
	if p.Service != nil {
		s.Service = &Entity{p.Service.ID, p.Service.Name}
	}
	if p.Route != nil {
		s.Route = &Entity{p.Route.ID, p.Route.Name}
	}
	if p.Consumer != nil {
		s.Consumer = &Entity{p.Consumer.ID, p.Consumer.Username}
	}
	if p.ConsumerGroup != nil {
		s.ConsumerGroup = &Entity{p.ConsumerGroup.ID, p.ConsumerGroup.Name}
	}
	s.Global = s.Service == nil && s.Route == nil && s.Consumer == nil && s.ConsumerGroup == nil
	return s
}

func inspectableOf(in *instance) inspectable {
	if p, ok := in.plugin.(inspected); ok {
		return p.inspectable()
	}
	return nil
}

// RateLimitPlugins lists the rate-limiting instances of the serving
// configuration, in configuration order.
func (g *Gateway) RateLimitPlugins() ([]RateLimitPlugin, error) {
	gen := g.gen.Load()
	if gen == nil {
		return nil, ErrNoConfig
	}
	out := []RateLimitPlugin{}
	for _, in := range gen.insts {
		if p := inspectableOf(in); p != nil {
			out = append(out, describe(in, p))
		}
	}
	return out, nil
}

func describe(in *instance, p inspectable) RateLimitPlugin {
	e := in.entity
	return RateLimitPlugin{ID: e.ID, Name: e.Name, InstanceName: e.InstanceName, Scope: scopeOf(e), Info: p.Info()}
}

// pluginOf finds a rate-limiting instance by id or instance_name, with
// the generation it belongs to.
func (g *Gateway) pluginOf(ref string) (*generation, *instance, inspectable, error) {
	gen := g.gen.Load()
	if gen == nil {
		return nil, nil, nil, ErrNoConfig
	}
	for _, in := range gen.insts {
		if in.entity.ID != ref && (in.entity.InstanceName == "" || in.entity.InstanceName != ref) {
			continue
		}
		if p := inspectableOf(in); p != nil {
			return gen, in, p, nil
		}
	}
	return nil, nil, nil, fmt.Errorf("%w: %s", ErrNoPlugin, quoteRef(ref))
}

// RateLimitPlugin describes the rate-limiting instance with id or
// instance_name ref.
func (g *Gateway) RateLimitPlugin(ref string) (RateLimitPlugin, error) {
	_, in, p, err := g.pluginOf(ref)
	if err != nil {
		return RateLimitPlugin{}, err
	}
	return describe(in, p), nil
}

// PluginCounter returns the counter of one identifier value of the
// instance with id or instance_name ref. found is false when the
// instance holds nothing for it. For an instance counting by consumer, a
// consumer's username or custom_id stands for its id, as in Kong's Admin
// API.
func (g *Gateway) PluginCounter(ctx context.Context, ref, identifier string) (c policy.Counter, found bool, err error) {
	gen, in, p, err := g.pluginOf(ref)
	if err != nil {
		return policy.Counter{}, false, err
	}
	c, err = p.Counter(ctx, counterIdentifier(gen, p, identifier), g.now())
	if err != nil {
		return policy.Counter{}, false, fmt.Errorf("gateway: plugin %s: %w", in.entity.ID, err)
	}
	return c, !c.Empty(), nil
}

// ResetCounter clears every window (or every lease) of one identifier
// value of the instance ref (a consumer's username or custom_id standing
// for its id, as in PluginCounter), logs it and counts it in
// sluice_admin_actions_total. held is as policy.ResetCounter reports it.
func (g *Gateway) ResetCounter(ctx context.Context, ref, identifier string) (held bool, err error) {
	gen, in, p, err := g.pluginOf(ref)
	if err != nil {
		g.AdminAction("reset_counter", "not_found")
		return false, err
	}
	id := counterIdentifier(gen, p, identifier)
	held, err = policy.ResetCounter(ctx, p, id, g.now())
	if err != nil {
		g.AdminAction("reset_counter", "error")
		g.log.Error("admin: resetting a counter failed", "plugin", in.entity.Name, "plugin_id", in.entity.ID,
			"identifier", identifier, "error", err.Error())
		return held, fmt.Errorf("gateway: plugin %s: %w", in.entity.ID, err)
	}
	outcome := "ok"
	if !held {
		outcome = "not_found"
	}
	g.AdminAction("reset_counter", outcome)
	g.log.Info("admin: counter reset", "plugin", in.entity.Name, "plugin_id", in.entity.ID,
		"instance_name", in.entity.InstanceName, "identifier", identifier, "counter_key", id, "held", held)
	return held, nil
}

// counterIdentifier is the value p counts identifier under: for an
// instance counting by consumer, the id of the consumer whose username or
// custom_id it is, when no consumer has it as its id.
func counterIdentifier(gen *generation, p inspectable, identifier string) string {
	if p.Info().Identifier != "consumer" {
		return identifier
	}
	for _, c := range gen.cfg.Consumers {
		if c.ID == identifier {
			return identifier
		}
	}
	for _, c := range gen.cfg.Consumers {
		if c.Username == identifier {
			return c.ID
		}
	}
	for _, c := range gen.cfg.Consumers {
		if c.CustomID != "" && c.CustomID == identifier {
			return c.ID
		}
	}
	return identifier
}

// TopList is the top list of one instance.
type TopList struct {
	Plugin  RateLimitPlugin   `json:"plugin"`
	By      string            `json:"by"`
	Entries []policy.TopEntry `json:"top"`
	// Consumers names, for an instance counting by consumer, the
	// consumers of the entries by id.
	Consumers map[string]ConsumerRef `json:"consumers,omitempty"`
}

// ConsumerRef names a consumer of the configuration.
type ConsumerRef struct {
	ID       string `json:"id"`
	Username string `json:"username,omitempty"`
	CustomID string `json:"custom_id,omitempty"`
}

// consumerOf returns the consumer with id, for an instance counting by
// consumer.
func consumerOf(gen *generation, p inspectable, id string) (ConsumerRef, bool) {
	if p.Info().Identifier != "consumer" {
		return ConsumerRef{}, false
	}
	for _, c := range gen.cfg.Consumers {
		if c.ID == id {
			return ConsumerRef{c.ID, c.Username, c.CustomID}, true
		}
	}
	return ConsumerRef{}, false
}

// topList builds the top list of one instance.
func topList(gen *generation, in *instance, p inspectable, byName string, entries []policy.TopEntry) TopList {
	l := TopList{Plugin: describe(in, p), By: byName, Entries: entries}
	for _, e := range entries {
		if c, ok := consumerOf(gen, p, e.Identifier); ok {
			if l.Consumers == nil {
				l.Consumers = map[string]ConsumerRef{}
			}
			l.Consumers[c.ID] = c
		}
	}
	return l
}

// PluginConsumer returns the consumer an identifier value of instance ref
// stands for (its id, username or custom_id), when the instance counts by
// consumer.
func (g *Gateway) PluginConsumer(ref, identifier string) (ConsumerRef, bool) {
	gen, _, p, err := g.pluginOf(ref)
	if err != nil {
		return ConsumerRef{}, false
	}
	return consumerOf(gen, p, counterIdentifier(gen, p, identifier))
}

// Top returns the n heaviest identifiers of the last minute, by requests
// or denials, of the instance ref, or of every instance when ref is "".
func (g *Gateway) Top(ref string, by policy.TopBy, n int) ([]TopList, error) {
	byName := "requests"
	if by == policy.TopByDenied {
		byName = "denied"
	}
	now := g.now()
	if ref != "" {
		gen, in, p, err := g.pluginOf(ref)
		if err != nil {
			return nil, err
		}
		return []TopList{topList(gen, in, p, byName, p.Top(now, by, n))}, nil
	}
	gen := g.gen.Load()
	if gen == nil {
		return nil, ErrNoConfig
	}
	out := []TopList{}
	for _, in := range gen.insts {
		if p := inspectableOf(in); p != nil {
			out = append(out, topList(gen, in, p, byName, p.Top(now, by, n)))
		}
	}
	return out, nil
}

// ExplainRequest describes a request to explain.
type ExplainRequest struct {
	Method   string              `json:"method"`
	Path     string              `json:"path"`
	Host     string              `json:"host"`
	Port     int                 `json:"port"`
	Headers  map[string][]string `json:"headers"`
	Query    map[string][]string `json:"query"`
	ClientIP string              `json:"client_ip"`
}

// ExplainError is a field of an ExplainRequest that cannot be used.
type ExplainError struct {
	Field, Message string
}

func (e *ExplainError) Error() string { return e.Field + ": " + e.Message }

// ExplainedPlugin is one plugin of the chain an explained request runs.
type ExplainedPlugin struct {
	Name         string `json:"name"`
	ID           string `json:"id"`
	InstanceName string `json:"instance_name,omitempty"`
	Priority     int    `json:"priority"`
	// Ran is false for a plugin after the one that would answer.
	Ran bool `json:"ran"`
	// Status is the answer this plugin would give (401, 429...), 0 if none.
	Status int `json:"status,omitempty"`
	// RateLimit is a rate-limiting plugin's explanation.
	RateLimit *policy.Explanation `json:"rate_limit,omitempty"`
}

// Explanation is what a request would get, found without counting it.
type Explanation struct {
	Route    *Entity           `json:"route"`
	Service  *Entity           `json:"service"`
	Consumer *Entity           `json:"consumer"`
	ClientIP string            `json:"client_ip"`
	Plugins  []ExplainedPlugin `json:"plugins"`
	// Allowed is whether the request would be proxied; Status is the
	// answer otherwise (404 when no route matches).
	Allowed bool `json:"allowed"`
	Status  int  `json:"status,omitempty"`
}

// Explain runs r through route matching and the access phase of its
// plugins, in Kong's order, without counting it: the authentication and
// dimension plugins run as for a real request; each rate-limiting plugin
// reports its identifier value, counter key, counts and whether it would
// admit the request, and changes nothing.
func (g *Gateway) Explain(ctx context.Context, r ExplainRequest) (Explanation, error) {
	gen := g.gen.Load()
	if gen == nil {
		return Explanation{}, ErrNoConfig
	}
	if r.Method == "" {
		r.Method = "GET"
	}
	if !validMethod(r.Method) {
		return Explanation{}, &ExplainError{"method", fmt.Sprintf("%q is not an HTTP method", r.Method)}
	}
	if r.Port < 0 || r.Port > 65535 {
		return Explanation{}, &ExplainError{"port", fmt.Sprintf("must be between 1 and 65535, got %d", r.Port)}
	}
	if r.Path == "" || r.Path[0] != '/' {
		return Explanation{}, &ExplainError{"path", fmt.Sprintf("must start with '/', got %q", r.Path)}
	}
	var ip netip.Addr
	if r.ClientIP != "" {
		var err error
		if ip, err = netip.ParseAddr(r.ClientIP); err != nil {
			return Explanation{}, &ExplainError{"client_ip", fmt.Sprintf("%q is not an IP address", r.ClientIP)}
		}
	} else {
		ip = netip.MustParseAddr("127.0.0.1")
	}
	var req fasthttp.Request
	uri := r.Path
	if len(r.Query) > 0 {
		uri += "?" + url.Values(r.Query).Encode()
	}
	req.SetRequestURI(uri)
	req.Header.SetMethod(r.Method)
	req.Header.SetHost(r.Host)
	names := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range r.Headers[k] {
			req.Header.Add(k, v)
		}
	}
	var fctx fasthttp.RequestCtx
	fctx.Init(&req, &net.TCPAddr{IP: ip.AsSlice()}, nil)

	now := g.now()
	x := newExchange().(*Exchange)
	x.ctx, x.Context, x.Now = &fctx, ctx, now
	x.respHeaders = x.hdrBuf[:0]
	x.plugins = x.pluginBuf[:0]
	x.setPath(&fctx)
	x.gen = gen
	x.ClientIP = ip.Unmap()
	out := Explanation{ClientIP: x.ClientIP.String(), Plugins: []ExplainedPlugin{}}

	port := r.Port
	if port == 0 {
		if _, p, err := net.SplitHostPort(r.Host); err == nil {
			port, _ = strconv.Atoi(p)
		}
	}
	m, ok := gen.router.Match(router.Request{Method: r.Method, Host: r.Host, Path: x.path, Port: port, Headers: &fctx.Request.Header})
	if !ok {
		out.Status = fasthttp.StatusNotFound
		return out, nil
	}
	x.Match, x.Route, x.Service = m, m.Route, m.Route.Service
	out.Route = &Entity{x.Route.ID, x.Route.Name}
	if x.Service != nil {
		out.Service = &Entity{x.Service.ID, x.Service.Name}
	}
	x.chain = gen.chains[m.Route]
	stopped := false
	for _, list := range x.chain.names {
		in := pick(list, x.Consumer)
		if in == nil {
			continue
		}
		ep := ExplainedPlugin{Name: in.entity.Name, ID: in.entity.ID, InstanceName: in.entity.InstanceName, Priority: in.priority}
		if stopped {
			out.Plugins = append(out.Plugins, ep)
			continue
		}
		ep.Ran = true
		if p, ok := in.plugin.(inspected); ok && p.inspectable() != nil {
			ex, err := p.inspectable().Explain(ctx, p.request(x))
			if err != nil {
				return Explanation{}, fmt.Errorf("gateway: explaining plugin %s: %w", in.entity.ID, err)
			}
			ep.RateLimit = &ex
			if !ex.Allowed {
				ep.Status, out.Status, stopped = ex.Status, ex.Status, true
			}
		} else {
			if err := in.plugin.Access(x); err != nil {
				return Explanation{}, fmt.Errorf("gateway: plugin %s: %w", in.entity.ID, err)
			}
			if x.responded {
				ep.Status = x.ctx.Response.StatusCode()
				out.Status, stopped = ep.Status, true
			}
		}
		out.Plugins = append(out.Plugins, ep)
	}
	if c := x.Consumer; c != nil {
		out.Consumer = &Entity{c.ID, c.Username}
	}
	if !stopped && x.Service == nil {
		out.Status = fasthttp.StatusServiceUnavailable
	}
	out.Allowed = out.Status == 0
	return out, nil
}

// AdminAction counts one admin action (reset_counter...) with its outcome
// in sluice_admin_actions_total.
func (g *Gateway) AdminAction(action, outcome string) {
	g.metrics.adminActions.WithLabelValues(action, outcome).Inc()
}

// validMethod reports whether m is an HTTP method: a token (RFC 9110).
func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return m != ""
}

// quoteRef quotes an id or instance_name for an error message.
func quoteRef(ref string) string { return "'" + ref + "'" }
