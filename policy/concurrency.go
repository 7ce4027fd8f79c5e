package policy

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/policy/field"
	"github.com/seed-008287da/sluice/ratelimit"
)

// ConcurrencyConfig is the config of sluice-concurrency as plain data, the
// same for the gateway and the Kong plugin: at most Limit requests in
// flight per key. Adapters decode their config into it; NewConcurrency
// validates it.
type ConcurrencyConfig struct {
	// Limit is the number of requests in flight per key; required, > 0.
	Limit *int64
	// LeaseTTL is the backstop lifetime of a lease in seconds; nil means
	// 60. A lease that is never released (a crashed node) lapses after it.
	LeaseTTL *float64
	// Identifier is ip ("" too), consumer, credential, service, route,
	// header (HeaderName) or dimension (Request.Dimension). A missing value
	// falls back to the client IP.
	Identifier string
	HeaderName string
	// Namespace separates unrelated leases; "" means "sluice-concurrency".
	Namespace string
	// Strategy is local ("" too: leases in this process) or redis (Redis,
	// leases shared by every gateway and Kong node on that Redis).
	Strategy string
	Redis    *RedisConfig
	// ErrorCode and ErrorMessage make the rejection; nil means 429 and
	// "Too many concurrent requests".
	ErrorCode    *int64
	ErrorMessage *string
	// HideClientHeaders drops X-Concurrency-Limit, X-Concurrency-Remaining
	// and Retry-After.
	HideClientHeaders bool
}

// Concurrency is a compiled sluice-concurrency plugin over a Registry's
// stores. It is safe for concurrent use; Close gives its store back.
type Concurrency struct {
	reg      *Registry
	key      storeKey
	store    Store
	max      int64
	limitStr string
	ttl      time.Duration
	ident    Identifier
	header   string
	status   int
	body     []byte
	hide     bool

	// For Info and Top (inspect.go).
	strategy string
	top      *TopKeys
	topID    string

	closed atomic.Bool
}

// A ConcurrencyResult is the answer to one Acquire. When Allowed, set
// Headers on the response and call Release with Lease once the response is
// sent; otherwise respond with Status, Headers and Body.
type ConcurrencyResult struct {
	Allowed bool
	// Status and Body are the rejection; 0 and nil when Allowed.
	Status int
	Body   []byte
	// Headers are X-Concurrency-Limit and X-Concurrency-Remaining, and
	// Retry-After (whole seconds, at least 1) and Content-Type on a
	// rejection. Hidden headers leave only Content-Type.
	Headers []Header
	// Lease is the granted lease; the zero value when denied.
	Lease Lease
}

// A Lease names one granted lease, for Release. Adapters may carry it
// across phases as its two strings.
type Lease struct {
	Key string
	ID  string
}

const (
	hdrConcLimit     = "X-Concurrency-Limit"
	hdrConcRemaining = "X-Concurrency-Remaining"
)

// NewConcurrency validates cfg and binds it to the store of its namespace
// and strategy in reg. An invalid config returns a *ValidationError with
// every problem, each naming its config.* field.
func NewConcurrency(cfg *ConcurrencyConfig, reg *Registry) (*Concurrency, error) {
	c, ns, err := compileConcurrency(cfg)
	if err != nil {
		return nil, err
	}
	strategy := StrategyLocal
	rc := RedisStoreConfig{Namespace: ns}
	if cfg.Strategy == StrategyRedis {
		strategy = StrategyRedis
		rc.Redis = *cfg.Redis
	}
	k, s, err := reg.storeFor(strategy, rc)
	if err != nil {
		return nil, err
	}
	c.reg, c.key, c.store, c.strategy = reg, k, s, strategy
	c.topID = "sluice-concurrency|" + ns
	c.top = reg.topFor(c.topID)
	return c, nil
}

// ValidateConcurrency checks cfg as NewConcurrency does, without a store.
func ValidateConcurrency(cfg *ConcurrencyConfig) error {
	_, _, err := compileConcurrency(cfg)
	return err
}

func compileConcurrency(cfg *ConcurrencyConfig) (*Concurrency, string, error) {
	var errs []field.Error
	add := func(path, msg string) { errs = append(errs, field.Error{Path: path, Message: msg}) }
	c := &Concurrency{ttl: time.Minute, ident: ByIP, status: 429,
		body: messageBody("Too many concurrent requests"), hide: cfg.HideClientHeaders}
	switch {
	case cfg.Limit == nil:
		add("config.limit", "required field missing")
	case *cfg.Limit <= 0:
		add("config.limit", "value must be greater than 0")
	default:
		c.max = *cfg.Limit
		c.limitStr = strconv.FormatInt(c.max, 10)
	}
	if cfg.LeaseTTL != nil {
		ms := *cfg.LeaseTTL * 1000
		if ms < 1 || ms != math.Trunc(ms) || *cfg.LeaseTTL > 86400 {
			add("config.lease_ttl", "expected a whole number of milliseconds between 0.001 and 86400 seconds")
		} else {
			c.ttl = time.Duration(ms) * time.Millisecond
		}
	}
	switch id := Identifier(cfg.Identifier); id {
	case "", ByIP:
	case ByConsumer, ByCredential, ByService, ByRoute, ByDimension:
		c.ident = id
	case ByHeader:
		c.ident = id
		if cfg.HeaderName == "" {
			add("config.header_name", "No header name provided")
		} else if msg := checkHeaderName(cfg.HeaderName); msg != "" {
			add("config.header_name", msg)
		}
		c.header = cfg.HeaderName
	default:
		add("config.identifier", "expected one of: ip, consumer, credential, service, route, header, dimension")
	}
	switch cfg.Strategy {
	case "", StrategyLocal:
		if cfg.Redis != nil {
			add("config.redis", "only used with strategy redis")
		}
	case StrategyRedis:
		if cfg.Redis == nil || cfg.Redis.Host == nil || *cfg.Redis.Host == "" {
			add("config.redis.host", "required with strategy redis")
		} else if msg := field.HostProblem(*cfg.Redis.Host); msg != "" {
			add("config.redis.host", msg)
		}
	default:
		add("config.strategy", "expected one of: local, redis")
	}
	if cfg.ErrorCode != nil {
		if *cfg.ErrorCode < 100 || *cfg.ErrorCode > 599 {
			add("config.error_code", "expected an HTTP status between 100 and 599")
		} else {
			c.status = int(*cfg.ErrorCode)
		}
	}
	if cfg.ErrorMessage != nil {
		c.body = messageBody(*cfg.ErrorMessage)
	}
	if len(errs) > 0 {
		return nil, "", &ValidationError{Errors: errs}
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = "sluice-concurrency"
	}
	return c, ns, nil
}

// Close gives the store back to the Registry. Close is idempotent.
func (c *Concurrency) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.reg.releaseTop(c.topID)
	return c.reg.release(c.key)
}

// Key returns the lease key of r: the identifier and its value, or the
// client IP when r lacks the value. Gateway and Kong nodes compute the
// same key, so on one Redis they share leases.
func (c *Concurrency) Key(r *Request) string {
	id, v := c.identify(r)
	return ratelimit.Key(id, v)
}

// identify returns the identifier r is counted by and its value.
func (c *Concurrency) identify(r *Request) (string, string) {
	var v string
	switch c.ident {
	case ByConsumer:
		v = r.Consumer.ID
		if v == "" {
			v = r.CredentialID
		}
	case ByCredential:
		v = r.CredentialID
	case ByService:
		v = r.ServiceID
	case ByRoute:
		v = r.RouteID
	case ByHeader:
		v = r.header(c.header)
	case ByDimension:
		v = r.Dimension
	}
	if v == "" {
		return string(ByIP), r.ClientIP
	}
	return string(c.ident), v
}

// Acquire takes a lease for r. An error means the store failed; adapters
// then let the request through, as the rate limiters do.
func (c *Concurrency) Acquire(ctx context.Context, r *Request) (ConcurrencyResult, error) {
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	ident, v := c.identify(r)
	key := ratelimit.Key(ident, v)
	id := ratelimit.NewLeaseID()
	l, err := c.store.Acquire(ctx, ratelimit.LeaseRequest{Key: key, ID: id, Max: c.max, TTL: c.ttl, Now: now})
	if err != nil {
		return ConcurrencyResult{}, err
	}
	c.top.Record(now, v, !l.Allowed)
	var res ConcurrencyResult
	if !c.hide {
		res.Headers = append(res.Headers, Header{hdrConcLimit, c.limitStr},
			Header{hdrConcRemaining, strconv.FormatInt(max(l.Remaining, 0), 10)})
	}
	if !l.Allowed {
		if !c.hide {
			secs := int64(math.Ceil(l.RetryAfter.Seconds()))
			res.Headers = append(res.Headers, Header{hdrRetryAfter, strconv.FormatInt(max(secs, 1), 10)})
		}
		res.Headers = append(res.Headers, Header{hdrContentType, contentTypeJSON})
		res.Status, res.Body = c.status, c.body
		return res, nil
	}
	res.Allowed = true
	res.Lease = Lease{Key: key, ID: id}
	return res, nil
}

// Release gives a lease back. A failure is harmless: the lease lapses
// after its TTL.
func (c *Concurrency) Release(ctx context.Context, l Lease) error {
	if l.ID == "" {
		return errors.New("policy: releasing a lease without an id")
	}
	return c.store.Release(ctx, l.Key, l.ID)
}
