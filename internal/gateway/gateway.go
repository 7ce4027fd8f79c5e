// Package gateway is sluice's standalone proxy: it loads Kong declarative
// configuration, matches routes, runs plugins (key-auth, the rate limiters,
// the business and concurrency plugins) and proxies to upstream services
// over fasthttp.
//
// A configuration is built and validated whole into an immutable
// generation, then swapped in atomically; requests in flight finish on the
// generation they started with. Resources that must outlive generations
// (counter stores, upstream connection pools) live in the Gateway and its
// Shared value, so a reload never resets a counter or drops keep-alive
// connections.
package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed-008287da/sluice/internal/gateway/clientip"
	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/internal/gateway/proxyproto"
	"github.com/seed-008287da/sluice/internal/gateway/router"
	"github.com/seed-008287da/sluice/internal/repeats"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/field"
)

// Errors.
var (
	// ErrNoConfig is returned when the gateway is asked about its
	// configuration before one was loaded.
	ErrNoConfig = errors.New("gateway: no configuration loaded")
	// ErrClosed is returned by Serve after Shutdown.
	ErrClosed = errors.New("gateway: closed")
)

// Defaults of Options.
const (
	DefaultMaxRequestBodySize  = 64 << 20
	DefaultReadTimeout         = 60 * time.Second
	DefaultIdleTimeout         = 60 * time.Second
	DefaultUpstreamIdleTimeout = 60 * time.Second
)

// Options configure a Gateway. The zero value serves with Kong's defaults,
// trusting no proxy, logging nothing.
type Options struct {
	// ClientIP computes client addresses; nil trusts no forwarding header.
	ClientIP *clientip.Resolver
	// Plugins are the available plugins; nil means DefaultPlugins().
	Plugins []PluginFactory
	// IgnorePlugins names plugins sluice does not implement that a
	// configuration may use anyway: their instances are skipped (logged
	// once per load). New refuses an authentication or authorization
	// plugin here, which would leave a protected route open, and a plugin
	// sluice implements.
	IgnorePlugins []string
	// Shared holds resources kept across reloads; nil makes a new one,
	// owned (and closed by Shutdown) by the gateway, whose stores log to
	// Logger and report their Redis state to Metrics. A Shared passed in
	// is the caller's to close; build it with
	// policy.RegistryOptions{OnRedisState: metrics.RedisStateChanged} for
	// sluice_redis_fallback to follow its stores.
	Shared *Shared
	// Logger receives JSON (or any) structured logs; nil discards them.
	Logger *slog.Logger
	// AccessLog logs every request at Info level on Logger.
	AccessLog bool
	// Metrics receives the gateway's metrics; nil creates them on a private
	// registry (see Gateway.Metrics).
	Metrics *Metrics
	// Tracer, when set, records a span per plugin decision (an
	// OpenTelemetry tracer from the SDK set up by the command).
	Tracer trace.Tracer
	// MaxRequestBodySize bounds request bodies in bytes; larger ones get
	// 413. Zero means DefaultMaxRequestBodySize.
	MaxRequestBodySize int
	// ReadTimeout bounds reading a request's headers and buffered body from
	// a client (slow clients are cut off). Zero means DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response to a client; zero means none,
	// which long-poll and streaming responses need.
	WriteTimeout time.Duration
	// IdleTimeout closes client keep-alive connections idle that long. Zero
	// means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// UpstreamIdleTimeout closes idle upstream connections; keep it below
	// the upstream's own keep-alive timeout (nginx: 75 s) or requests race
	// the upstream's close. Zero means DefaultUpstreamIdleTimeout.
	UpstreamIdleTimeout time.Duration
	// HeaderBuffers bound request lines and headers as nginx's
	// large_client_header_buffers does: a request line longer than Size
	// gets 414, a header line longer than Size 400 (Kong's "Request header
	// or cookie too large"), and so does a header block over Number ×
	// Size. The zero value is 4 × 8 KiB, Kong's default.
	HeaderBuffers HeaderBuffers
	// ClientHeaderBufferSize is nginx's client_header_buffer_size (Kong's
	// nginx_http_client_header_buffer_size): a request line may be as long
	// as the larger of it and HeaderBuffers.Size. Zero means 1 KiB.
	ClientHeaderBufferSize int
	// Now returns the time used for decisions; nil means time.Now.
	Now func() time.Time
	// LookupEnv resolves the environment references of a configuration:
	// decK's ${{ env "DECK_X" }} and Kong's {vault://env/NAME}. Nil
	// resolves none, so a configuration using one is rejected.
	LookupEnv kongconf.LookupEnv
	// GroupPolicyOverrides reads rate-limiting-advanced entries under
	// consumer_groups[].plugins as legacy consumer-group overrides (decK's
	// --consumer-group-policy-overrides, Kong <= 3.3) instead of 3.4+
	// group-scoped plugins. RLA instances with enforce_consumer_groups then
	// take the override of the first listed group the consumer is in.
	GroupPolicyOverrides bool
	// DefaultCertificates are served on TLS listeners to clients whose
	// server name no configured SNI matches (Kong's ssl_cert and
	// ssl_cert_key); nil means a self-signed certificate generated at the
	// first such handshake.
	DefaultCertificates []tls.Certificate
	// HealthCheckTicker makes the ticker of an upstream's active health
	// checks at an interval; nil means a time.Ticker.
	HealthCheckTicker func(interval time.Duration) Ticker
}

// Shared is the state that outlives configuration generations: the
// policy registry owning the rate-limiting counter stores (keyed by
// namespace, so a reload keeps counters) and other long-lived resources
// plugins ask for by key. It is safe for concurrent use.
type Shared struct {
	policy *policy.Registry

	mu     sync.Mutex
	values map[string]io.Closer
}

// NewShared returns a Shared whose policy registry is built with opts.
func NewShared(opts policy.RegistryOptions) *Shared {
	return &Shared{policy: policy.NewRegistry(opts)}
}

// Policy returns the registry of rate-limiting stores.
func (s *Shared) Policy() *policy.Registry { return s.policy }

// Value returns the resource stored under key, creating it with create on
// first use. Resources are closed by Close.
func (s *Shared) Value(key string, create func() (io.Closer, error)) (io.Closer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.values[key]; ok {
		return v, nil
	}
	v, err := create()
	if err != nil {
		return nil, err
	}
	if s.values == nil {
		s.values = map[string]io.Closer{}
	}
	s.values[key] = v
	return v, nil
}

// Close closes the registry and every resource.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := []error{s.policy.Close()}
	for _, v := range s.values {
		errs = append(errs, v.Close())
	}
	s.values = nil
	return errors.Join(errs...)
}

// A Gateway proxies requests according to its current configuration
// generation. Its methods are safe for concurrent use.
type Gateway struct {
	draining  atomic.Bool // set by Shutdown
	opts      Options
	factories map[string]*PluginFactory
	ignored   map[string]bool // Options.IgnorePlugins
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time
	// repeats logs errors met on every request (a failing counter store)
	// at most once per interval and kind.
	repeats *repeats.Logger
	// base is when the gateway was made: time.Since(base) is a monotonic
	// reading that costs one clock read, where time.Now costs two (wall
	// and monotonic clocks), for timing the plugins.
	base time.Time

	gen       atomic.Pointer[generation]
	genSeq    atomic.Uint64
	loadMu    sync.Mutex
	reloadLog reloadLog

	ownShared bool
	upstreams sync.Map // upstreamKey -> *fasthttp.HostClient
	server    *fasthttp.Server
	// headerBuffers is Options.HeaderBuffers or its default.
	headerBuffers HeaderBuffers
	headerFirst   int // Options.ClientHeaderBufferSize or its default
	inflight      sync.WaitGroup
	active        atomic.Int64
	started       time.Time
	reqSeq        atomic.Uint64
	exchanges     sync.Pool // *Exchange, reused by requests (see Exchange.release)

	selfOnce  sync.Once // the generated default certificate
	selfCert  *tls.Certificate
	selfErr   error
	tlsMu     sync.Mutex
	closed    bool
	h2servers []*http.Server

	targetHealth *prometheus.GaugeVec // sluice_upstream_target_health
	trust        sync.Map             // trustKey -> *upstreamTrust
}

// generation is one built configuration.
type generation struct {
	seq      uint64
	cfg      *kongconf.Config
	raw      []byte
	hash     string
	source   string
	loadedAt time.Time
	router   *router.Router
	chains   map[*kongconf.Route]*chain
	insts    []*instance // enabled plugin instances, in configuration order
	closers  []io.Closer
	// counters caches the request counter of each (route, status), so the
	// hot path skips the label hashing of WithLabelValues.
	counters sync.Map // counterKey -> prometheus.Counter
	// clients caches the upstream client of each service.
	clients sync.Map // *kongconf.Service -> *fasthttp.HostClient
	// certs are the certificates by SNI.
	certs *certStore
	// balancers are the upstreams' load balancers, with their targets'
	// health; checkers run their active health checks once the
	// generation serves.
	balancers map[*kongconf.Upstream]*balancer
	checkers  *checkers
}

type counterKey struct {
	route *kongconf.Route
	code  int
}

// close releases the generation's plugin instances (their references to
// shared stores). Requests still running on it finish: stores are only
// closed when no generation uses their namespace any more.
func (gen *generation) close() error {
	gen.checkers.stop()
	var errs []error
	for _, c := range gen.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// New returns a Gateway with no configuration: until Load succeeds every
// request gets 503.
func New(opts Options) (*Gateway, error) {
	g := &Gateway{opts: opts, log: opts.Logger, now: opts.Now, metrics: opts.Metrics, base: time.Now()}
	g.exchanges.New = newExchange
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.repeats = &repeats.Logger{Log: g.log, Now: g.now}
	if g.metrics == nil {
		m, err := NewMetrics(nil)
		if err != nil {
			return nil, err
		}
		g.metrics = m
	}
	g.targetHealth = newTargetHealthGauge(g.metrics.Registry)
	if g.opts.Shared == nil {
		g.ownShared = true
		g.opts.Shared = NewShared(policy.RegistryOptions{Logger: g.log, OnRedisState: g.metrics.RedisStateChanged})
	}
	if err := newSyncMetrics(g.opts.Shared.Policy(), time.Now).register(g.metrics.Registry); err != nil {
		return nil, fmt.Errorf("gateway: registering metrics: %w", err)
	}
	if g.opts.ClientIP == nil {
		g.opts.ClientIP = &clientip.Resolver{}
	}
	fs := opts.Plugins
	if fs == nil {
		fs = DefaultPlugins()
	}
	g.factories = make(map[string]*PluginFactory, len(fs))
	for i := range fs {
		g.factories[fs[i].Name] = &fs[i]
	}
	g.ignored = make(map[string]bool, len(opts.IgnorePlugins))
	for _, name := range opts.IgnorePlugins {
		switch {
		case g.factories[name] != nil:
			return nil, fmt.Errorf("gateway: ignore plugins: sluice implements %q; remove it from the list", name)
		case protectsRoutes[name]:
			return nil, fmt.Errorf("gateway: ignore plugins: %q authenticates or authorizes requests; skipping it would leave its routes open", name)
		}
		g.ignored[name] = true
	}
	g.headerBuffers = opts.HeaderBuffers.orDefault()
	g.headerFirst = orInt(opts.ClientHeaderBufferSize, 1<<10)
	g.server = &fasthttp.Server{
		// The whole header block is read into one buffer; the lines are
		// held to headerBuffers.Size by checkRequest.
		ReadBufferSize:        g.headerBuffers.Number*g.headerBuffers.Size + g.headerFirst,
		Handler:               g.handle,
		Name:                  "sluice",
		StreamRequestBody:     true,
		MaxRequestBodySize:    orInt(opts.MaxRequestBodySize, DefaultMaxRequestBodySize),
		ReadTimeout:           orDur(opts.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:          opts.WriteTimeout,
		IdleTimeout:           orDur(opts.IdleTimeout, DefaultIdleTimeout),
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		NoDefaultDate:         false,
		CloseOnShutdown:       true,
		ErrorHandler:          g.serverError,
	}
	g.started = g.now()
	return g, nil
}

func orInt(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func orDur(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}

// Metrics returns the gateway's metrics (and through them the registry to
// expose).
func (g *Gateway) Metrics() *Metrics { return g.metrics }

// Shared returns the state kept across reloads.
func (g *Gateway) Shared() *Shared { return g.opts.Shared }

// Validate builds data as Load would, without serving it. The error is a
// kongconf.Errors listing every problem.
func (g *Gateway) Validate(data []byte) error {
	gen, err := g.build(data, "validate")
	if err != nil {
		return err
	}
	return gen.close()
}

// Load builds and validates data whole and, only if it is valid, makes it
// the configuration serving new requests. A rejected configuration leaves
// the current one serving; the error lists every problem. source names
// where the configuration came from in logs and metrics ("file", "admin",
// "etcd").
func (g *Gateway) Load(data []byte, source string) error {
	_, err := g.Apply(data, source)
	return err
}

// Apply is Load, and reports whether data changed the configuration: a
// configuration the same as the serving one (by its SHA-256) is not
// applied again.
func (g *Gateway) Apply(data []byte, source string) (changed bool, err error) {
	g.loadMu.Lock()
	defer g.loadMu.Unlock()
	gen, err := g.build(data, source)
	if err != nil {
		g.metrics.reloads.WithLabelValues(source, "rejected").Inc()
		g.recordReload(source, "rejected", err)
		g.log.Error("configuration rejected", "source", source, "error", err.Error())
		return false, err
	}
	if cur := g.gen.Load(); cur != nil && cur.hash == gen.hash {
		_ = gen.close()
		g.metrics.reloads.WithLabelValues(source, "unchanged").Inc()
		g.recordReload(source, "unchanged", nil)
		return false, nil
	}
	gen.seq = g.genSeq.Add(1)
	gen.checkers = g.startHealthChecks(gen)
	old := g.gen.Swap(gen)
	if old != nil {
		if err := old.close(); err != nil {
			g.log.Warn("closing previous configuration", "error", err.Error())
		}
	}
	g.metrics.reloads.WithLabelValues(source, "applied").Inc()
	g.recordReload(source, "applied", nil)
	g.metrics.generation.Set(float64(gen.seq))
	g.metrics.lastReload.Set(float64(gen.loadedAt.UnixNano()) / 1e9)
	redisNamespaces := map[string]bool{}
	for _, in := range gen.insts {
		if p, ok := in.plugin.(inspected); ok {
			if info := p.inspectable().Info(); info.Strategy == "redis" {
				redisNamespaces[info.Namespace] = true
			}
		}
	}
	g.metrics.redisInUse(redisNamespaces)
	g.log.Info("configuration applied", "source", source, "generation", gen.seq, "sha256", gen.hash,
		"services", len(gen.cfg.Services), "routes", len(gen.cfg.Routes), "plugins", len(gen.cfg.Plugins))
	return true, nil
}

func (g *Gateway) build(data []byte, source string) (*generation, error) {
	cfg, errs := kongconf.DecodeWith(data, kongconf.DecodeOptions{LookupEnv: g.opts.LookupEnv})
	if cfg == nil {
		return nil, errs
	}
	decoded := len(errs)
	var insts []*instance
	var closers []io.Closer
	var namespaces policy.NamespaceSet
	var overrides map[string]*policy.OverrideConfig
	if g.opts.GroupPolicyOverrides || cfg.Info.ConsumerGroupPolicyOverrides {
		overrides = map[string]*policy.OverrideConfig{}
		for _, p := range cfg.Plugins {
			if p.ConsumerGroup == nil || p.Name != "rate-limiting-advanced" || p.Config == nil {
				continue
			}
			o, err := policy.ParseOverride(p.Config)
			if err != nil {
				errs = append(errs, fieldErrors(p.Where, err)...)
				continue
			}
			overrides[p.ConsumerGroup.Name] = o
			overrides[p.ConsumerGroup.ID] = o
		}
	}
	for _, p := range cfg.Plugins {
		if p.Name == "" || p.Config == nil {
			continue // reported by kongconf
		}
		if overrides != nil && p.ConsumerGroup != nil && p.Name == "rate-limiting-advanced" {
			continue // a legacy override, read above
		}
		f, ok := g.factories[p.Name]
		switch {
		case !ok && !p.Enabled:
			g.log.Info("plugin disabled (enabled: false): not built", "plugin", p.Name, "at", p.Where)
			continue
		case !ok && g.ignored[p.Name]:
			g.log.Warn("plugin not implemented by sluice: skipped (--ignore-plugins)", "plugin", p.Name, "at", p.Where)
			continue
		case !ok:
			errs = append(errs, field.Error{Path: p.Where + ".name", Message: g.unknownPlugin(p.Name)})
			continue
		}
		r, ok := rank(p)
		if !ok {
			continue // reported by kongconf
		}
		pl, err := f.New(p.Config, &BuildEnv{Entity: p, Config: cfg, Shared: g.opts.Shared, Logger: g.log, Repeats: g.repeats, Namespaces: &namespaces, Metrics: g.metrics, MaxBodySize: g.server.MaxRequestBodySize, GroupOverrides: overrides})
		if err != nil {
			errs = append(errs, fieldErrors(p.Where, err)...)
			continue
		}
		if c, ok := pl.(io.Closer); ok {
			closers = append(closers, c)
		}
		if p.Enabled {
			in := &instance{entity: p, factory: f, plugin: pl, rank: r, priority: f.Priority,
				latency: g.metrics.decisionTime.WithLabelValues(p.Name)}
			if n, ok := pl.(namespaced); ok {
				in.limiter, in.namespace = true, n.Namespace()
			}
			insts = append(insts, in)
		}
	}
	if len(errs) > 0 {
		for _, c := range closers {
			_ = c.Close()
		}
		errs = append(errs[:decoded], cfg.LaterErrors(errs[decoded:])...)
		return nil, errs
	}
	sum := sha256.Sum256(data)
	gen := &generation{
		cfg:       cfg,
		raw:       append([]byte(nil), data...),
		hash:      hex.EncodeToString(sum[:]),
		source:    source,
		loadedAt:  g.now(),
		router:    router.New(cfg.Routes),
		chains:    make(map[*kongconf.Route]*chain, len(cfg.Routes)),
		insts:     insts,
		closers:   closers,
		certs:     newCertStore(cfg),
		balancers: buildBalancers(cfg),
	}
	for _, r := range cfg.Routes {
		ch := buildChain(insts, r)
		service := ""
		if r.Service != nil {
			service = nameOrID(r.Service.Name, r.Service.ID)
		}
		ch.metrics = g.metrics.routeMetrics(nameOrID(r.Name, r.ID), service)
		gen.chains[r] = ch
	}
	return gen, nil
}

// unknownPlugin says that sluice does not implement name and what it does
// implement.
func (g *Gateway) unknownPlugin(name string) string {
	names := make([]string, 0, len(g.factories))
	for n := range g.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	hint := "; --ignore-plugins " + name + " skips its instances"
	if protectsRoutes[name] {
		hint = "" // never skipped: its routes would be open
	}
	return fmt.Sprintf("plugin '%s' is not implemented by sluice (it implements %s)%s", name, strings.Join(names, ", "), hint)
}

// protectsRoutes are Kong's authentication and authorization plugins:
// skipping one would serve its routes unprotected.
var protectsRoutes = map[string]bool{
	"key-auth": true, "key-auth-enc": true, "basic-auth": true, "jwt": true, "jwt-signer": true,
	"oauth2": true, "oauth2-introspection": true, "openid-connect": true, "hmac-auth": true,
	"ldap-auth": true, "ldap-auth-advanced": true, "mtls-auth": true, "session": true,
	"vault-auth": true, "saml": true, "acl": true, "ip-restriction": true, "bot-detection": true,
	"opa": true, "request-validator": true, "oas-validation": true,
}

// Config returns the configuration serving requests as it was loaded, and
// where it came from.
func (g *Gateway) Config() (data []byte, source string, err error) {
	gen := g.gen.Load()
	if gen == nil {
		return nil, "", ErrNoConfig
	}
	return gen.raw, gen.source, nil
}

// Inflight returns the number of requests being handled, streaming
// responses and tunnels included.
func (g *Gateway) Inflight() int64 { return g.active.Load() }

// Status describes the gateway for health checks.
type Status struct {
	// Ready is true once a configuration is serving.
	Ready bool `json:"ready"`
	// Draining is true once Shutdown has begun.
	Draining bool `json:"draining,omitempty"`
	// Generation counts applied configurations, from 1.
	Generation uint64 `json:"generation"`
	// ConfigHash is the SHA-256 of the serving configuration.
	ConfigHash string `json:"configuration_hash,omitempty"`
	// ConfigSource is where it came from.
	ConfigSource string    `json:"configuration_source,omitempty"`
	LoadedAt     time.Time `json:"loaded_at,omitzero"`
	StartedAt    time.Time `json:"started_at"`
	Services     int       `json:"services"`
	Routes       int       `json:"routes"`
	Plugins      int       `json:"plugins"`
	Consumers    int       `json:"consumers"`
}

// Status returns the current status.
func (g *Gateway) Status() Status {
	st := Status{StartedAt: g.started, Draining: g.draining.Load()}
	if gen := g.gen.Load(); gen != nil {
		st.Ready = true
		st.Generation = gen.seq
		st.ConfigHash = gen.hash
		st.ConfigSource = gen.source
		st.LoadedAt = gen.loadedAt
		st.Services = len(gen.cfg.Services)
		st.Routes = len(gen.cfg.Routes)
		st.Plugins = len(gen.cfg.Plugins)
		st.Consumers = len(gen.cfg.Consumers)
	}
	return st
}

// Serve accepts proxy connections on ln until Shutdown. It returns nil
// after a graceful shutdown.
func (g *Gateway) Serve(ln net.Listener) error {
	err := g.server.Serve(&lfListener{Listener: ln, g: g})
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("gateway: serving: %w", err)
	}
	return nil
}

// Shutdown stops accepting connections, closes idle ones and waits until
// every request in flight (streaming responses and tunnels included) has
// ended or ctx is done. Then it releases the configuration's plugins and,
// when the gateway made its own Shared, closes it.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.draining.Store(true)
	g.tlsMu.Lock()
	g.closed = true
	h2 := g.h2servers
	g.tlsMu.Unlock()
	var wg sync.WaitGroup
	for _, srv := range h2 {
		wg.Go(func() { _ = srv.Shutdown(ctx) }) // its requests are counted in inflight below
	}
	err := g.server.ShutdownWithContext(ctx)
	wg.Wait()
	done := make(chan struct{})
	go func() {
		g.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	g.upstreams.Range(func(k, v any) bool {
		v.(*fasthttp.HostClient).CloseIdleConnections()
		return true
	})
	if gen := g.gen.Load(); gen != nil {
		err = errors.Join(err, gen.close())
	}
	if g.ownShared {
		err = errors.Join(err, g.opts.Shared.Close())
	}
	if err != nil {
		return fmt.Errorf("gateway: shutting down: %w", err)
	}
	return nil
}

func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	status, msg := fasthttp.StatusBadRequest, "Bad request"
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, msg = fasthttp.StatusRequestEntityTooLarge, "Request size limit exceeded"
	case isTimeout(err):
		status, msg = fasthttp.StatusRequestTimeout, "Request timeout"
	}
	var small *fasthttp.ErrSmallBuffer
	reason := clientBadRequest
	switch {
	case status == fasthttp.StatusRequestEntityTooLarge:
		reason = clientBodyTooLarge
	case status == fasthttp.StatusRequestTimeout:
		reason = clientTimeout
	case errors.As(err, &small):
		// The header block is over Number × Size: nginx's 494, Kong's 400.
		msg, reason = "Request header or cookie too large", clientHeaderTooBig
	}
	g.clientError(reason)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json; charset=utf-8")
	ctx.SetBody(kongErrorBody(msg, ""))
	ctx.SetConnectionClose()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// peerAddr returns the TCP peer of a request and, behind a PROXY protocol
// listener, the client address its header announced (else the zero Addr).
func peerAddr(ctx *fasthttp.RequestCtx) (peer, proxied netip.Addr) {
	ra := ctx.RemoteAddr()
	if pa, ok := ra.(*proxyproto.Addr); ok {
		ra, proxied = pa.Peer, pa.Source.Addr()
	}
	switch a := ra.(type) {
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), proxied
	}
	if ap, err := netip.ParseAddrPort(ra.String()); err == nil {
		return ap.Addr().Unmap(), proxied
	}
	return netip.Addr{}, proxied
}
