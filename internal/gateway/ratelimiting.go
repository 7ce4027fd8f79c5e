package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/internal/repeats"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/field"
)

// checker is what both rate-limiting plugins compile to
// (*policy.Advanced and *policy.Basic). CheckAppend writes the headers into
// a slice the exchange reuses, so a check allocates none for them.
type checker interface {
	CheckAppend(ctx context.Context, r *policy.Request, dst []policy.Header) (policy.Result, error)
	Close() error
}

// rateLimiting adapts a compiled policy (rate-limiting-advanced or
// rate-limiting) to the gateway: it fills a policy.Request from the
// exchange and applies the Result as it is.
type rateLimiting struct {
	name  string
	c     checker
	scope policy.Group
	warn  *repeats.Logger
	id    string // the plugin entity's id: the kind of its repeated warnings
}

func newRateLimitingAdvanced(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	raw, err := withKongKeys(raw, env.Entity, true)
	if err != nil {
		return nil, err
	}
	cfg, err := policy.ParseAdvanced(raw)
	if err != nil {
		return nil, err
	}
	if env.Namespaces != nil && env.Entity.Enabled { // a disabled instance counts nothing
		if err := env.Namespaces.Settle(cfg, env.Entity.Where); err != nil && env.Logger != nil {
			env.Logger.Error(err.Error())
		}
	}
	if cfg.EnforceConsumerGroups && env.GroupOverrides != nil {
		cfg.Overrides = map[string]*policy.OverrideConfig{}
		for _, g := range cfg.ConsumerGroups {
			if o, ok := env.GroupOverrides[g]; ok {
				cfg.Overrides[g] = o
			}
		}
	}
	a, err := policy.NewAdvanced(cfg, env.Shared.Policy())
	if err != nil {
		return nil, err
	}
	return newRateLimitingPlugin("rate-limiting-advanced", a, env), nil
}

func newRateLimitingBasic(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	cfg, err := policy.ParseBasic(raw)
	if err != nil {
		return nil, err
	}
	var sc policy.Scope
	if env.Entity.Route != nil {
		sc.RouteID = env.Entity.Route.ID
	}
	if env.Entity.Service != nil {
		sc.ServiceID = env.Entity.Service.ID
	}
	b, err := policy.NewBasic(cfg, sc, env.Shared.Policy())
	if err != nil {
		return nil, err
	}
	return newRateLimitingPlugin("rate-limiting", b, env), nil
}

func newRateLimitingPlugin(name string, c checker, env *BuildEnv) *rateLimiting {
	rl := &rateLimiting{name: name, c: c, warn: env.Repeats, id: env.Entity.ID}
	if g := env.Entity.ConsumerGroup; g != nil {
		rl.scope = policy.Group{ID: g.ID, Name: g.Name}
	}
	return rl
}

// withKongKeys adds the plugin id Kong adds to a plugin's config, so that a
// config without a namespace counts under the plugin's stable id and keeps
// its counters across reloads.
func withKongKeys(raw json.RawMessage, p *kongconf.Plugin, pluginID bool) (json.RawMessage, error) {
	if !pluginID {
		return raw, nil
	}
	var m map[string]json.RawMessage
	if err := field.Decode("config", raw, &m); err != nil {
		return nil, kongconf.Errors{err.(field.Error)}
	}
	if _, ok := m["__plugin_id"]; ok {
		return raw, nil
	}
	id, _ := json.Marshal(p.ID) // a string always marshals
	m["__plugin_id"] = id
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("gateway: encoding plugin config: %w", err)
	}
	return b.Bytes(), nil
}

func (rl *rateLimiting) Close() error { return rl.c.Close() }

// Namespace returns the counters' namespace: config.namespace of
// rate-limiting-advanced, "" for rate-limiting, which has none.
func (rl *rateLimiting) Namespace() string {
	if n, ok := rl.c.(namespaced); ok {
		return n.Namespace()
	}
	return ""
}

// request fills the exchange's policy.Request for x (reused: a
// policy.Request per call would escape to the heap).
func (rl *rateLimiting) request(x *Exchange) *policy.Request {
	req := &x.polReq
	*req = policy.Request{
		ClientIP:     x.clientIP(),
		CredentialID: x.Credential,
		Path:         x.Path(),
		Method:       x.Method(),
		Header:       x.header,
		ScopeGroup:   rl.scope,
		Dimension:    x.Identifier,
		Quota:        x.Quota,
		Now:          x.Now,
	}
	if x.Route != nil {
		req.RouteID = x.Route.ID
	}
	if x.Service != nil {
		req.ServiceID = x.Service.ID
	}
	if c := x.Consumer; c != nil {
		req.Consumer = policy.Consumer{ID: c.ID, Username: c.Username, CustomID: c.CustomID}
		for _, g := range c.Groups {
			req.Groups = append(req.Groups, policy.Group{ID: g.ID, Name: g.Name})
		}
	}
	return req
}

func (rl *rateLimiting) Access(x *Exchange) error {
	req := rl.request(x)
	res, err := rl.c.CheckAppend(x.Context, req, x.polHdr[:0])
	if errors.Is(err, policy.ErrInvalidQuota) {
		// Decided on the plugin's own limits; the override is at fault,
		// not the store.
		rl.warn.Warn("quota "+rl.id, "ignoring quota override", "plugin", rl.name, "key", x.Identifier, "error", err.Error())
		err = nil
	}
	if err != nil {
		x.StoreError(rl.name, err)
	}
	contentType := ""
	for _, h := range res.Headers {
		if !res.Allowed && h.Name == "Content-Type" {
			contentType = h.Value
			continue
		}
		x.SetResponseHeader(h.Name, h.Value)
	}
	switch {
	case !res.Allowed:
		x.Respond(res.Status, contentType, res.Body)
		x.Outcome(rl.name, "denied")
		x.DeniedBy(rl.name, res.Limit, res.Window)
	case res.Denied:
		x.Outcome(rl.name, "shadow_denied")
	case err != nil:
		x.Outcome(rl.name, "store_error")
	default:
		x.Outcome(rl.name, "allowed")
	}
	return nil
}
