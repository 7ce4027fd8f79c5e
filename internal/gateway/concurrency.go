package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/field"
)

// concurrencyConfig is the config of sluice-concurrency, the same fields
// as the Kong plugin of that name (internal/kongplugin), with "dimension"
// in place of "shared" as the identifier fed by sluice-dimensions. The
// rules are policy.Concurrency's.
type concurrencyConfig struct {
	Limit             *int64          `json:"limit"`
	LeaseTTL          *float64        `json:"lease_ttl"`
	Identifier        string          `json:"identifier"`
	HeaderName        string          `json:"header_name"`
	Namespace         string          `json:"namespace"`
	Strategy          string          `json:"strategy"`
	Redis             *leaseRedisConf `json:"redis"`
	ErrorCode         *int64          `json:"error_code"`
	ErrorMessage      *string         `json:"error_message"`
	HideClientHeaders bool            `json:"hide_client_headers"`
}

// leaseRedisConf is the Redis of strategy redis, with Kong's field names
// (a subset of rate-limiting-advanced's config.redis).
type leaseRedisConf struct {
	Host       string `json:"host"`
	Port       int64  `json:"port"`
	Database   int64  `json:"database"`
	Username   string `json:"username"`
	Password   string `json:"password"`
	SSL        bool   `json:"ssl"`
	SSLVerify  bool   `json:"ssl_verify"`
	ServerName string `json:"server_name"`
	// Timeout is in milliseconds (default 2000).
	Timeout int64 `json:"timeout"`
}

// policyRedis maps the record onto policy.RedisConfig, Kong's defaults
// filling what is unset.
func (r *leaseRedisConf) policyRedis() *policy.RedisConfig {
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	port, timeout := r.Port, r.Timeout
	if port == 0 {
		port = 6379
	}
	if timeout == 0 {
		timeout = 2000
	}
	return &policy.RedisConfig{Host: opt(r.Host), Port: &port, Database: r.Database,
		Username: opt(r.Username), Password: opt(r.Password), SSL: r.SSL, SSLVerify: r.SSLVerify,
		ServerName: opt(r.ServerName), ConnectTimeout: &timeout, SendTimeout: &timeout, ReadTimeout: &timeout}
}

// concurrency is the sluice-concurrency plugin: at most Limit requests in
// flight per key. The lease taken in the access phase is released when
// the response has been sent or the client went away (the log phase); its
// TTL is the backstop.
type concurrency struct {
	c *policy.Concurrency
}

func newConcurrency(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c concurrencyConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	pc := policy.ConcurrencyConfig{Limit: c.Limit, LeaseTTL: c.LeaseTTL, Identifier: c.Identifier,
		HeaderName: c.HeaderName, Namespace: c.Namespace, Strategy: c.Strategy,
		ErrorCode: c.ErrorCode, ErrorMessage: c.ErrorMessage, HideClientHeaders: c.HideClientHeaders}
	var errs kongconf.Errors
	if c.Redis != nil {
		pc.Redis = c.Redis.policyRedis()
		switch {
		case c.Redis.Port < 0 || c.Redis.Port > 65535:
			errs = append(errs, field.Error{Path: "config.redis.port", Message: "expected a port between 0 and 65535"})
		case c.Redis.Timeout < 0:
			errs = append(errs, field.Error{Path: "config.redis.timeout", Message: "must not be negative"})
		}
	}
	if err := policy.ValidateConcurrency(&pc); err != nil || len(errs) > 0 {
		pe, _ := field.Of(err)
		return nil, append(kongconf.Errors(pe), errs...)
	}
	pol, err := policy.NewConcurrency(&pc, env.Shared.Policy())
	if err != nil {
		return nil, err
	}
	return &concurrency{c: pol}, nil
}

func (p *concurrency) Close() error { return p.c.Close() }

// Namespace returns the leases' namespace.
func (p *concurrency) Namespace() string { return p.c.Namespace() }

// request fills the exchange's policy.Request for x.
func (p *concurrency) request(x *Exchange) *policy.Request {
	req := &x.polReq
	*req = policy.Request{ClientIP: x.clientIP(), CredentialID: x.Credential, Header: x.header,
		Dimension: x.Identifier, Now: x.Now}
	if x.Consumer != nil {
		req.Consumer = policy.Consumer{ID: x.Consumer.ID, Username: x.Consumer.Username, CustomID: x.Consumer.CustomID}
	}
	if x.Service != nil {
		req.ServiceID = x.Service.ID
	}
	if x.Route != nil {
		req.RouteID = x.Route.ID
	}
	return req
}

func (p *concurrency) Access(x *Exchange) error {
	req := p.request(x)
	res, err := p.c.Acquire(x.Context, req)
	if err != nil {
		// Fail open, as the rate limiters do when their store fails.
		x.StoreError("sluice-concurrency", err)
		x.Outcome("sluice-concurrency", "store_error")
		return nil
	}
	for _, h := range res.Headers {
		if h.Name != "Content-Type" { // Respond sets it
			x.SetResponseHeader(h.Name, h.Value)
		}
	}
	if !res.Allowed {
		x.Respond(res.Status, jsonType, res.Body)
		x.Outcome("sluice-concurrency", "denied")
		return nil
	}
	lease := res.Lease
	x.OnEnd(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.c.Release(ctx, lease) // on failure the TTL frees the slot
	})
	x.Outcome("sluice-concurrency", "allowed")
	return nil
}
