package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// concurrencyConfig is the config of sluice-concurrency, the same fields
// as the Kong plugin of that name (internal/kongplugin), with "dimension"
// in place of "shared" as the identifier fed by sluice-dimensions.
type concurrencyConfig struct {
	// Limit is the number of requests in flight per key; required, > 0.
	Limit *int64 `json:"limit"`
	// LeaseTTL is the backstop lifetime of a lease in seconds (default 60):
	// a lease that is never released (a crashed node) lapses after it.
	LeaseTTL *float64 `json:"lease_ttl"`
	// Identifier is ip (default), consumer, credential, service, route,
	// header (HeaderName) or dimension; a missing value falls back to ip.
	Identifier   string  `json:"identifier"`
	HeaderName   string  `json:"header_name"`
	Namespace    string  `json:"namespace"`
	Strategy     string  `json:"strategy"`
	ErrorCode    *int    `json:"error_code"`
	ErrorMessage *string `json:"error_message"`
	// HideClientHeaders drops X-Concurrency-Limit, X-Concurrency-Remaining
	// and Retry-After.
	HideClientHeaders bool `json:"hide_client_headers"`
}

// concurrency is the sluice-concurrency plugin: at most Limit requests in
// flight per key. The lease taken in the access phase is released when
// the response has been sent or the client went away (the log phase); its
// TTL is the backstop.
type concurrency struct {
	store      ratelimit.Store
	max        int64
	ttl        time.Duration
	ident      string
	headerName string
	status     int
	body       []byte
	hide       bool
	limitStr   string
}

// leaseSeq numbers lease ids within the process; the store key scopes
// them, and local stores are per process.
var leaseSeq atomic.Uint64

func newConcurrency(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c concurrencyConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	add := func(path, msg string) { errs = append(errs, kongconf.FieldError{Path: path, Msg: msg}) }
	p := &concurrency{ttl: time.Minute, ident: c.Identifier, status: 429,
		body: kongErrorBody("Too many concurrent requests", ""), hide: c.HideClientHeaders}
	switch {
	case c.Limit == nil:
		add("config.limit", "required field missing")
	case *c.Limit <= 0:
		add("config.limit", "value must be greater than 0")
	default:
		p.max = *c.Limit
		p.limitStr = strconv.FormatInt(p.max, 10)
	}
	if c.LeaseTTL != nil {
		ms := *c.LeaseTTL * 1000
		if ms < 1 || ms != math.Trunc(ms) || *c.LeaseTTL > 86400 {
			add("config.lease_ttl", "expected a whole number of milliseconds between 0.001 and 86400 seconds")
		} else {
			p.ttl = time.Duration(ms) * time.Millisecond
		}
	}
	if p.ident == "" {
		p.ident = "ip"
	}
	switch p.ident {
	case "ip", "consumer", "credential", "service", "route", "dimension":
	case "header":
		if c.HeaderName == "" {
			add("config.header_name", "No header name provided")
		}
		p.headerName = c.HeaderName
	default:
		add("config.identifier", "expected one of: ip, consumer, credential, service, route, header, dimension")
	}
	if c.Strategy != "" && c.Strategy != "local" {
		add("config.strategy", "expected local (leases are kept in this gateway's memory)")
	}
	if c.ErrorCode != nil {
		if *c.ErrorCode < 100 || *c.ErrorCode > 599 {
			add("config.error_code", "expected an HTTP status between 100 and 599")
		} else {
			p.status = *c.ErrorCode
		}
	}
	if c.ErrorMessage != nil {
		p.body = kongErrorBody(*c.ErrorMessage, "")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	ns := c.Namespace
	if ns == "" {
		ns = "sluice-concurrency"
	}
	s, err := env.Shared.Value("concurrency|local|"+ns, func() (io.Closer, error) {
		return memorystore.New(memorystore.Options{}), nil
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: lease store: %w", err)
	}
	p.store = s.(ratelimit.Store)
	return p, nil
}

func (p *concurrency) key(x *Exchange) string {
	v := ""
	switch p.ident {
	case "consumer":
		if x.Consumer != nil {
			v = x.Consumer.ID
		} else {
			v = x.Credential
		}
	case "credential":
		v = x.Credential
	case "service":
		if x.Service != nil {
			v = x.Service.ID
		}
	case "route":
		if x.Route != nil {
			v = x.Route.ID
		}
	case "header":
		v = x.Header(p.headerName)
	case "dimension":
		v = x.Identifier
	}
	if v == "" {
		return ratelimit.Key("ip", x.ClientIP.String())
	}
	return ratelimit.Key(p.ident, v)
}

func (p *concurrency) Access(x *Exchange) error {
	key := p.key(x)
	id := strconv.FormatUint(leaseSeq.Add(1), 36)
	l, err := p.store.Acquire(x.Context, ratelimit.LeaseRequest{Key: key, ID: id, Max: p.max, TTL: p.ttl, Now: x.Now})
	if err != nil {
		// Fail open, as the rate limiters do when their store fails.
		x.StoreError("sluice-concurrency", err)
		x.Outcome("sluice-concurrency", "store_error")
		return nil
	}
	if !p.hide {
		x.AddResponseHeader("X-Concurrency-Limit", p.limitStr)
		x.AddResponseHeader("X-Concurrency-Remaining", strconv.FormatInt(l.Remaining, 10))
	}
	if !l.Allowed {
		if !p.hide {
			secs := int64(math.Ceil(l.RetryAfter.Seconds()))
			x.AddResponseHeader("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		}
		x.Respond(p.status, jsonType, p.body)
		x.Outcome("sluice-concurrency", "denied")
		return nil
	}
	x.OnEnd(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.store.Release(ctx, key, id) // on failure the TTL frees the slot
	})
	x.Outcome("sluice-concurrency", "allowed")
	return nil
}
