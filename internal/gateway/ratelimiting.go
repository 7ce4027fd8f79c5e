package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/ratelimit"
)

// checker is what both rate-limiting plugins compile to.
type checker interface {
	Check(ctx context.Context, r *policy.Request) (policy.Result, error)
	Close() error
}

// rateLimiting adapts a compiled policy (rate-limiting-advanced or
// rate-limiting) to the gateway: it fills a policy.Request from the
// exchange and applies the Result as it is.
type rateLimiting struct {
	name  string
	c     checker
	scope policy.Group
	log   *slog.Logger

	// For rate-limiting-advanced: the config and the limiters compiled
	// for quota overrides, one per distinct set of limits, sharing the
	// namespace (and so the counters) of the plugin.
	cfg      *policy.AdvancedConfig
	reg      *policy.Registry
	mu       sync.Mutex
	variants map[string]*policy.Advanced
}

// maxVariants bounds the limiters compiled for distinct quota overrides of
// one plugin instance.
const maxVariants = 1024

func newRateLimitingAdvanced(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	raw, err := withKongKeys(raw, env.Entity, true)
	if err != nil {
		return nil, err
	}
	cfg, err := policy.ParseAdvanced(raw)
	if err != nil {
		return nil, policyErrors(err)
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
		return nil, policyErrors(err)
	}
	rl := newRateLimitingPlugin("rate-limiting-advanced", a, env)
	rl.cfg, rl.reg = cfg, env.Shared.Policy()
	return rl, nil
}

func newRateLimitingBasic(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	cfg, err := policy.ParseBasic(raw)
	if err != nil {
		return nil, policyErrors(err)
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
		return nil, policyErrors(err)
	}
	return newRateLimitingPlugin("rate-limiting", b, env), nil
}

func newRateLimitingPlugin(name string, c checker, env *BuildEnv) *rateLimiting {
	rl := &rateLimiting{name: name, c: c, log: env.Logger}
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
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, kongconf.Errors{{Path: "config", Msg: err.Error()}}
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

// policyErrors turns the policy's validation error into field errors
// (its paths already start with "config").
func policyErrors(err error) error {
	ve, ok := err.(*policy.ValidationError)
	if !ok {
		return err
	}
	out := make(kongconf.Errors, len(ve.Errors))
	for i, fe := range ve.Errors {
		out[i] = kongconf.FieldError{Path: fe.Path, Msg: fe.Message}
	}
	return out
}

func (rl *rateLimiting) Close() error {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	errs := []error{rl.c.Close()}
	for _, v := range rl.variants {
		errs = append(errs, v.Close())
	}
	rl.variants = nil
	return errors.Join(errs...)
}

// variant returns the limiter of a quota override: the plugin's config
// with the override's limits.
func (rl *rateLimiting) variant(q []ratelimit.Limit, algSet bool) (checker, error) {
	var b strings.Builder
	for _, l := range q {
		b.WriteString(l.String())
		b.WriteByte(';')
	}
	fp := b.String()
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if v, ok := rl.variants[fp]; ok {
		return v, nil
	}
	if len(rl.variants) >= maxVariants {
		return nil, fmt.Errorf("gateway: more than %d distinct quota overrides", maxVariants)
	}
	cfg := *rl.cfg
	cfg.Limit, cfg.WindowSize = nil, nil
	for _, l := range q {
		if l.Window%time.Second != 0 {
			return nil, fmt.Errorf("gateway: quota window %s is not a whole number of seconds", l.Window)
		}
		cfg.Limit = append(cfg.Limit, l.Count)
		cfg.WindowSize = append(cfg.WindowSize, int64(l.Window/time.Second))
	}
	if algSet && len(q) > 0 {
		cfg.WindowType = policy.WindowSliding
		if q[0].Algorithm == ratelimit.FixedWindow {
			cfg.WindowType = policy.WindowFixed
		}
	}
	a, err := policy.NewAdvanced(&cfg, rl.reg)
	if err != nil {
		return nil, err
	}
	if rl.variants == nil {
		rl.variants = map[string]*policy.Advanced{}
	}
	rl.variants[fp] = a
	return a, nil
}

func (rl *rateLimiting) Access(x *Exchange) error {
	req := policy.Request{
		ClientIP:     x.ClientIP.String(),
		CredentialID: x.Credential,
		Path:         x.Path(),
		Method:       x.Method(),
		Header:       x.Header,
		ScopeGroup:   rl.scope,
		Dimension:    x.Identifier,
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
	c := rl.c
	if x.Quota != nil && rl.cfg != nil {
		v, err := rl.variant(x.Quota, x.QuotaAlgorithmSet)
		if err != nil {
			return err
		}
		c = v
	}
	var res policy.Result
	var err error
	if a, ok := c.(*policy.Advanced); ok {
		var buf [8]policy.Header // the usual headers, without an allocation
		res, err = a.CheckAppend(x.Context, &req, buf[:0])
	} else {
		res, err = c.Check(x.Context, &req)
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
		x.AddResponseHeader(h.Name, h.Value)
	}
	switch {
	case !res.Allowed:
		x.Respond(res.Status, contentType, res.Body)
		x.Outcome(rl.name, "denied")
	case res.Denied:
		x.Outcome(rl.name, "shadow_denied")
	case err != nil:
		x.Outcome(rl.name, "store_error")
	default:
		x.Outcome(rl.name, "allowed")
	}
	return nil
}
