package decision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/repeats"
	"github.com/seed-008287da/sluice/policy/field"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// Sentinel errors of the service.
var (
	// ErrInvalidRequest wraps every error about a request that can never be
	// decided (no domain, no descriptors, an unusable override or
	// hits_addend). gRPC answers it with InvalidArgument, HTTP with 400.
	ErrInvalidRequest = errors.New("decision: invalid request")
	// ErrStoreChanged is returned by Update when the new configuration
	// selects a different store: counters would be lost, so that takes a
	// restart.
	ErrStoreChanged = errors.New("decision: store settings changed; restart to apply them")
	// ErrNoConfig is returned by Decide while no configuration has been
	// loaded (the one at start was rejected and no good one followed).
	// gRPC answers it with Unavailable, HTTP with 503, so Envoy applies its
	// failure_mode_deny, as envoyproxy/ratelimit's answer does.
	ErrNoConfig = errors.New("no rate limit configuration loaded")
)

// keyPrefix is the first part of every counter key, so the decision
// service's counters never meet those of other sluice adapters sharing a
// Redis.
const keyPrefix = "rls"

// Options configures a Service. The zero value is ready to use.
type Options struct {
	// Now is the clock; nil means time.Now. Tests pass a fixed clock.
	Now func() time.Time
	// Logger receives reloads and store failures; nil discards them.
	Logger *slog.Logger
	// OnReload, when set, is called after every reload attempt by Reload
	// with the generation in use afterwards and the reload's error (nil
	// when the new configuration is in use). It runs on the reloading
	// goroutine.
	OnReload func(generation uint64, err error)
	// Registry receives the service's Prometheus metrics; nil means a new
	// registry (see Service.Registry). Never the global default one.
	Registry *prometheus.Registry
	// HealthyWithConfig reports the service unhealthy (Healthy, gRPC
	// health, /healthcheck) until a configuration with at least one domain
	// is loaded, and again whenever one without domains is:
	// envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
	HealthyWithConfig bool
	// MergeDomains is ParseOptions.MergeDomains for OpenFiles and
	// ReloadFiles.
	MergeDomains bool
	// QuotaMode makes every descriptor a quota (see Descriptor.QuotaMode):
	// envoyproxy/ratelimit's QUOTA_MODE.
	QuotaMode bool
	// ShadowMode answers OK to every request, as the file's shadow_mode:
	// envoyproxy/ratelimit's SHADOW_MODE.
	ShadowMode bool
	// ResponseHeaders, when set, adds envoyproxy/ratelimit's rate-limit
	// headers under these names to every response, whatever the file says:
	// its LIMIT_RESPONSE_HEADERS_ENABLED with LIMIT_LIMIT_HEADER,
	// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER.
	ResponseHeaders *HeaderNames
	// DynamicMetadata fills the response's dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain,
	// the request's descriptors, hitsAddend, and the metadata of the
	// descriptors within their limits.
	DynamicMetadata bool
	// PeerStats counts envoyproxy/ratelimit's per-limit statistics
	// (total_hits, over_limit, near_limit, within_limit, shadow_mode,
	// over_limit_with_local_cache under
	// ratelimit.service.rate_limit.<domain>.<key>); see Service.PeerStats.
	PeerStats bool
	// NearLimitRatio is the share of a limit above which hits count as
	// near_limit; zero means 0.8 (envoyproxy/ratelimit's NEAR_LIMIT_RATIO).
	NearLimitRatio float64
	// LocalCacheBytes, when positive, remembers the keys found over their
	// limit for the rest of their window and answers them without asking
	// the store, in about this many bytes (envoyproxy/ratelimit's
	// LOCAL_CACHE_SIZE_IN_BYTES). A reload forgets them.
	LocalCacheBytes int
	// Store, when set, is the store of every configuration, replacing the
	// file's default: envoyproxy/ratelimit's REDIS_* settings. A
	// configuration with its own store section is then rejected, so the
	// two never silently disagree.
	Store *StoreConfig
	// StopIncrementWhenOverLimit counts none of a request's descriptors
	// when any of them would be over its limit: envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT. The statuses are as
	// without it.
	StopIncrementWhenOverLimit bool
	// CountDenied counts a denied call's hits in the counter anyway, as
	// envoyproxy/ratelimit does (it increments before it compares): a
	// denied large hits_addend then uses up the window. The default is
	// all or nothing. Token buckets are never charged for a denied call.
	CountDenied bool
	// StartInvalid makes OpenFile and OpenFiles start the service without
	// a configuration when the one given is invalid, as
	// envoyproxy/ratelimit keeps running with a bad file: requests are
	// answered with ErrNoConfig until a valid one is reloaded, and the
	// error is logged and shown in Status. Store failures still fail.
	StartInvalid bool
	// TopKeys is how many descriptors each domain's top list tracks per
	// ten seconds (GET /rate-limiting/top): six times that many entries of
	// memory per domain, whatever the traffic. Zero means
	// policy.DefaultTopKeys (128); negative keeps no top lists.
	TopKeys int
	// AdminToken, when set, is required in the Kong-Admin-Token header of
	// the counters calls of Handler (inspect, reset, top), which answer
	// 401 without it. Empty leaves them open: keep the HTTP port on
	// loopback or a private network.
	AdminToken string
	// AdminHosts are the Host values the counters calls answer (host:port,
	// as adminauth.LoopbackHosts returns for the HTTP listen address);
	// others get 421, so a page on another name resolved to this address
	// (DNS rebinding) reaches nothing. Empty accepts any. The decision
	// endpoints (/json, /check, ...) answer every Host: proxies send their
	// own.
	AdminHosts []string
}

// A Service decides Envoy rate limit requests against the current
// configuration and a counter store. It implements
// envoy.service.ratelimit.v3.RateLimitService and serves the same
// decisions over HTTP (see Handler).
//
// The configuration can be replaced at any time with Update or Reload; the
// store, and so every counter, is kept. A Service is safe for concurrent
// use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer

	gen      atomic.Pointer[generation]
	now      func() time.Time
	log      *slog.Logger
	repeats  *repeats.Logger // store failures: one line per interval and domain
	onReload func(uint64, error)
	m        *metrics

	mu sync.Mutex // serializes Update; guards the fields below
	// store is nil until the first configuration opens it (Open with a
	// nil Config); storeCfg is the store section it was opened from, nil
	// when the caller gave the store to New.
	store        ratelimit.Store
	storeCfg     *StoreConfig
	ownsStore    bool
	reloadErrors atomic.Int64
	lastError    atomic.Pointer[string]
	// lastRejected is the configuration rejected last, until one is
	// applied: the same bytes delivered again (the watcher's first read of
	// the file the service started with) are not parsed, logged or counted
	// again.
	lastRejected atomic.Pointer[rejection]

	healthyWithConfig bool
	mergeDomains      bool
	quotaMode         bool
	shadowMode        bool
	headers           *HeaderNames
	dynamicMetadata   bool
	peer              *peerStats
	overCache         *overCache
	storeOverride     *StoreConfig
	stopIncrement     bool
	countDenied       bool
	adminToken        string
	adminHosts        adminauth.Hosts
	draining          atomic.Bool
	healthMu          sync.Mutex
	healthHooks       []func(bool)

	// tops holds a top-list sketch per domain (inspect.go), each of topK
	// entries per ten seconds.
	tops sync.Map // domain -> *policy.TopKeys
	topK int
}

// A generation is one configuration, compiled. It is never modified after
// it is published.
type generation struct {
	// cfg is nil while no configuration has been loaded.
	cfg   *Config
	store ratelimit.Store
	// concurrent decides the descriptors of one request at once. The
	// memory store answers in well under a microsecond, less than a
	// goroutine costs; a remote store answers in a round trip.
	concurrent bool
	domains    map[string]*node
	stats      map[string]*domainStats
	number     uint64
	loaded     time.Time
	digest     string
}

// New returns a Service deciding with cfg over store. The caller keeps
// ownership of store: Close does not close it. A nil cfg starts the
// service without a configuration: every request is answered with
// ErrNoConfig until Update or Reload gives it one. It fails only when
// opts.Registry already holds metrics of the same names.
func New(cfg *Config, store ratelimit.Store, opts Options) (*Service, error) {
	s, err := newServiceBase(opts)
	if err != nil {
		return nil, err
	}
	s.use(cfg, store)
	return s, nil
}

// use makes store the service's and cfg, when not nil, its first
// configuration.
func (s *Service) use(cfg *Config, store ratelimit.Store) {
	s.store = store
	if cfg == nil {
		s.gen.Store(&generation{store: store})
		return
	}
	s.gen.Store(s.compile(cfg, "", 1))
	s.m.generation.Set(1)
}

func newServiceBase(opts Options) (*Service, error) {
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	s := &Service{now: opts.Now, log: opts.Logger, onReload: opts.OnReload, m: m, healthyWithConfig: opts.HealthyWithConfig, mergeDomains: opts.MergeDomains, topK: opts.TopKeys,
		quotaMode: opts.QuotaMode, shadowMode: opts.ShadowMode, headers: opts.ResponseHeaders, dynamicMetadata: opts.DynamicMetadata,
		storeOverride: opts.Store, stopIncrement: opts.StopIncrementWhenOverLimit, countDenied: opts.CountDenied,
		adminToken: opts.AdminToken, adminHosts: adminauth.NewHosts(opts.AdminHosts)}
	if opts.PeerStats {
		s.peer = newPeerStats(opts.NearLimitRatio)
	}
	if opts.LocalCacheBytes > 0 {
		s.overCache = newOverCache(opts.LocalCacheBytes)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.repeats = &repeats.Logger{Log: s.log, Now: s.now}
	return s, nil
}

// Open opens the store cfg.Store selects and returns a Service over it that
// closes the store in Close. A nil cfg starts the service without a
// configuration and without a store: the first configuration given to
// Update or Reload opens its store, and until then every request is
// answered with ErrNoConfig.
//
// The Redis store connects on its first call: a Redis that is down at
// start is not an error; the service decides with local counters until it
// answers (see docs/redis.md), and exports the store's state as
// sluice_redis_fallback and sluice_redis_fault.
func Open(cfg *Config, opts Options) (*Service, error) {
	s, err := newServiceBase(opts)
	if err != nil {
		return nil, err
	}
	s.ownsStore = true
	if cfg == nil {
		s.gen.Store(&generation{})
		return s, nil
	}
	cfg, err = withStore(cfg, opts.Store)
	if err != nil {
		return nil, err
	}
	st, err := s.openStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	s.use(cfg, st)
	sc := cfg.Store
	s.storeCfg = &sc
	return s, nil
}

// openStore opens the store sc selects.
func (s *Service) openStore(sc StoreConfig) (ratelimit.Store, error) {
	switch sc.Type {
	case "", "memory":
		return memorystore.New(memorystore.Options{MaxKeys: int(sc.Memory.MaxKeys)}), nil
	case "redis":
		rc := sc.Redis
		st, err := redisstore.Open(rc.Config, redisstore.Options{
			Namespace:     rc.Namespace,
			SyncRate:      rc.SyncRate,
			Timeout:       rc.Timeout,
			CallerClock:   rc.ServiceClock,
			EnvoyLayout:   rc.EnvoyLayout,
			Logger:        s.log,
			SettingName:   rc.settingName,
			OnStateChange: s.m.redisStateChanged(rc.Namespace),
		})
		if err != nil {
			return nil, fmt.Errorf("decision: opening the redis store: %w", err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("%w: unknown store %q", ErrInvalidConfig, sc.Type)
}

// OpenFile parses the configuration file at path, opens its store and
// returns a Service over it that closes the store in Close. Reload ignores
// later deliveries of the same content. An invalid file is an error unless
// opts.StartInvalid is set.
func OpenFile(path string, opts Options) (*Service, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("decision: reading config: %w", err)
	}
	sum := sha256.Sum256(data)
	cfg, err := Parse(data)
	return openParsed(cfg, err, hex.EncodeToString(sum[:]), opts)
}

// OpenFiles is OpenFile for a directory of files (see ParseFiles and
// Options.MergeDomains); ReloadFiles ignores later deliveries of the same
// files.
func OpenFiles(files []File, opts Options) (*Service, error) {
	cfg, err := ParseFiles(files, ParseOptions{MergeDomains: opts.MergeDomains})
	return openParsed(cfg, err, filesDigest(files), opts)
}

func openParsed(cfg *Config, parseErr error, digest string, opts Options) (*Service, error) {
	if parseErr == nil {
		cfg, parseErr = withStore(cfg, opts.Store)
	}
	if parseErr != nil {
		if !opts.StartInvalid {
			return nil, parseErr
		}
		s, err := Open(nil, opts)
		if err != nil {
			return nil, err
		}
		s.rejected(parseErr)
		if errors.Is(parseErr, ErrInvalidConfig) {
			s.lastRejected.Store(&rejection{digest, parseErr})
		}
		return s, nil
	}
	s, err := Open(cfg, opts)
	if err != nil {
		return nil, err
	}
	s.gen.Store(s.compile(cfg, digest, 1))
	if s.peer != nil {
		s.peer.loadSuccess.Add(1)
	}
	return s, nil
}

// withStore returns cfg with the store override in place of its default.
func withStore(cfg *Config, override *StoreConfig) (*Config, error) {
	if override == nil {
		return cfg, nil
	}
	if cfg.storeSet {
		return nil, &ConfigError{Errors: []field.Error{{Path: "store", Message: "the store is set by the environment (REDIS_URL, REDIS_TYPE, ...); remove the store section or those variables"}}}
	}
	c := *cfg
	c.Store = *override
	return &c, nil
}

// A rejection is a configuration that was not applied, by digest.
type rejection struct {
	digest string
	err    error
}

// rejected records a configuration that was not applied.
func (s *Service) rejected(err error) {
	s.reloadErrors.Add(1)
	if s.peer != nil {
		s.peer.loadError.Add(1)
	}
	s.m.reloads.WithLabelValues("rejected").Inc()
	msg := err.Error()
	s.lastError.Store(&msg)
	if s.gen.Load().cfg == nil {
		s.log.Error("decision: config rejected; no configuration is loaded, every request is answered \""+ErrNoConfig.Error()+"\"", "err", err)
	} else {
		s.log.Error("decision: config reload rejected; keeping the old config", "err", err)
	}
}

// Close closes the store if the Service opened it.
func (s *Service) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ownsStore && s.store != nil {
		err := s.store.Close()
		s.store = nil
		return err
	}
	return nil
}

// compile builds the generation of cfg over s.store; s.mu is held or s is
// not yet shared.
func (s *Service) compile(cfg *Config, digest string, number uint64) *generation {
	_, inProcess := s.store.(*memorystore.Store)
	g := &generation{cfg: cfg, store: s.store, concurrent: !inProcess, domains: make(map[string]*node, len(cfg.Domains)),
		stats: make(map[string]*domainStats, len(cfg.Domains)), number: number, loaded: s.now()}
	for _, d := range cfg.Domains {
		g.domains[d.Name] = compileTree(d.Name, d.Descriptors)
		g.stats[d.Name] = s.m.domain(d.Name)
	}
	g.digest = digest
	return g
}

// Config returns the configuration in use, nil while none is loaded. It
// must not be modified.
func (s *Service) Config() *Config { return s.gen.Load().cfg }

// Healthy reports whether the service should receive traffic: not after
// Drain, and, with Options.HealthyWithConfig, only while a configuration
// with at least one domain is loaded.
func (s *Service) Healthy() bool {
	if s.draining.Load() {
		return false
	}
	if s.healthyWithConfig {
		cfg := s.gen.Load().cfg
		return cfg != nil && len(cfg.Domains) > 0
	}
	return true
}

// Drain reports the service unhealthy from now on, so load balancers stop
// sending to it while in-flight calls finish (envoyproxy/ratelimit does
// this on SIGTERM). Decisions are still answered.
func (s *Service) Drain() {
	s.draining.Store(true)
	s.healthChanged()
}

// onHealth registers f to be called with Healthy's value now and whenever
// it may have changed.
func (s *Service) onHealth(f func(bool)) {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	s.healthHooks = append(s.healthHooks, f)
	f(s.Healthy())
}

func (s *Service) healthChanged() {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	h := s.Healthy()
	for _, f := range s.healthHooks {
		f(h)
	}
}

// Update replaces the configuration. Requests already being decided finish
// with the old one; counters are kept, so a limit whose window stays the
// same keeps counting where it was. It returns ErrStoreChanged, and keeps
// the old configuration, when cfg selects a different store.
func (s *Service) Update(cfg *Config) error { return s.update(cfg, "") }

// Reload parses data and, when it is valid, makes it the configuration.
// On error the old configuration stays in use. Data equal to what the
// configuration in use was loaded from (by OpenFile or Reload) is ignored,
// so a watcher may deliver the same file twice.
func (s *Service) Reload(data []byte) error {
	sum := sha256.Sum256(data)
	return s.reload(hex.EncodeToString(sum[:]), func() (*Config, error) { return Parse(data) })
}

// ReloadFiles is Reload for a directory of files (see ParseFiles), merging
// domains given in several files when Options.MergeDomains is set.
func (s *Service) ReloadFiles(files []File) error {
	return s.reload(filesDigest(files), func() (*Config, error) {
		return ParseFiles(files, ParseOptions{MergeDomains: s.mergeDomains})
	})
}

func filesDigest(files []File) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Service) reload(digest string, parse func() (*Config, error)) error {
	if g := s.gen.Load(); g.cfg != nil && digest == g.digest {
		return nil
	}
	if r := s.lastRejected.Load(); r != nil && r.digest == digest {
		msg := r.err.Error()
		s.lastError.Store(&msg)
		return r.err
	}
	cfg, err := parse()
	if err != nil {
		// Only a file that does not parse is the same error again; a
		// store that could not open may open at the next delivery.
		s.lastRejected.Store(&rejection{digest, err})
	} else {
		err = s.update(cfg, digest)
	}
	if err != nil {
		s.rejected(err)
	} else {
		s.m.reloads.WithLabelValues("applied").Inc()
		s.lastError.Store(nil)
		s.lastRejected.Store(nil)
		if s.peer != nil {
			s.peer.loadSuccess.Add(1)
		}
	}
	if s.onReload != nil {
		s.onReload(s.gen.Load().number, err)
	}
	return err
}

func (s *Service) update(cfg *Config, digest string) error {
	cfg, err := withStore(cfg, s.storeOverride)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.gen.Load()
	switch {
	case s.store == nil:
		st, err := s.openStore(cfg.Store)
		if err != nil {
			return err
		}
		s.store = st
		sc := cfg.Store
		s.storeCfg = &sc
	case s.storeCfg != nil && !reflect.DeepEqual(*s.storeCfg, cfg.Store):
		return ErrStoreChanged
	case s.storeCfg == nil && old.cfg != nil && !reflect.DeepEqual(old.cfg.Store, cfg.Store):
		return ErrStoreChanged
	}
	g := s.compile(cfg, digest, old.number+1)
	s.gen.Store(g)
	if s.overCache != nil {
		s.overCache.reset() // limits may have changed
	}
	s.m.generation.Set(float64(g.number))
	s.log.Info("decision: config loaded", "generation", g.number, "domains", len(cfg.Domains))
	s.healthChanged()
	return nil
}

// ShouldRateLimit implements the Envoy rate limit service. Request errors
// are answered with InvalidArgument, store failures with Unavailable, so
// Envoy applies its failure_mode_deny setting.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	if s.peer != nil {
		s.peer.requests.Add(1)
	}
	resp, err := s.Decide(ctx, req, s.now())
	s.m.observe(viaGRPC, start, resp, err)
	if s.peer != nil {
		s.peer.responseTime.add(time.Since(start))
	}
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

// Decide answers req at time now.
//
// Each descriptor is looked up in req's domain and, when a limit applies,
// counted under its own key with cost hits_addend (the descriptor's own
// hits_addend when set, else the request's, zero meaning 1). A descriptor
// hits_addend of 0 checks without counting: the status says whether one
// more hit would be allowed. Descriptors are decided independently, as
// envoyproxy/ratelimit does: an allowed descriptor keeps its hits even
// when another one is over limit. A descriptor without a limit, and every
// descriptor of an unknown domain, is answered OK. It returns an error
// wrapping ErrInvalidRequest for an undecidable request, ErrNoConfig while
// no configuration is loaded, or the store's error.
func (s *Service) Decide(ctx context.Context, req *rlspb.RateLimitRequest, now time.Time) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, fmt.Errorf("%w: rate limit domain must not be empty", ErrInvalidRequest)
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, fmt.Errorf("%w: rate limit descriptor list must not be empty", ErrInvalidRequest)
	}
	g := s.gen.Load()
	if g.cfg == nil {
		return nil, ErrNoConfig
	}
	tree := g.domains[req.GetDomain()]
	if tree == nil && s.peer != nil {
		s.peer.domainNotFound(req.GetDomain(), len(descs))
	}
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}

	var inline [4]match
	ms := inline[:0]
	for i, d := range descs {
		m, err := s.ruleFor(g.cfg, tree, d)
		if err != nil {
			return nil, fmt.Errorf("%w: descriptor %d: %w", ErrInvalidRequest, i, err)
		}
		ms = append(ms, m)
	}
	// A limit named in the replaces of any applying limit is not checked.
	var replaced map[string]bool
	for _, m := range ms {
		if m.rule == nil {
			continue
		}
		for _, name := range m.rule.replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
	}
	// Costs are checked before anything is counted, so an invalid request
	// takes nothing.
	pending := 0
	for i := range ms {
		m := &ms[i]
		// An unlimited limit stays unlimited when replaced, as in
		// envoyproxy/ratelimit: its status keeps the remaining 2^32-1.
		if m.rule != nil && m.rule.name != "" && replaced[m.rule.name] && !m.rule.unlimited {
			*m = match{}
		}
		m.cost = hits
		if h := descs[i].GetHitsAddend(); h != nil {
			if h.GetValue() > math.MaxInt64 {
				return nil, fmt.Errorf("%w: descriptor %d: hits_addend must be at most %d, got %d", ErrInvalidRequest, i, int64(math.MaxInt64), h.GetValue())
			}
			m.cost = int64(h.GetValue())
		}
		if m.rule != nil && !m.rule.unlimited {
			pending++
			m.key = g.storeKey(req.GetDomain(), descs[i], m.node)
		}
	}

	if s.stopIncrement && pending > 1 {
		// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: when any descriptor
		// would be over its limit, none is counted.
		for _, m := range ms {
			if m.rule == nil || m.rule.unlimited {
				continue
			}
			if m.rule.denyAll >= 0 {
				s.peekAll(ms)
				break
			}
			cost := max(m.cost, 1)
			dec, err := g.store.Take(ctx, ratelimit.Request{Key: m.key, Limits: m.rule.limits, Cost: cost, Now: now, Peek: true, AllowOnly: true})
			if err != nil {
				return nil, s.storeFailed(req.GetDomain(), err)
			}
			if !dec.Allowed {
				s.peekAll(ms)
				break
			}
		}
	}

	resp, blocks := newResponse(len(descs))
	var inlineOut [4]outcome
	outs := inlineOut[:0]
	for range descs {
		outs = append(outs, outNoLimit)
	}
	var ran []checkResult // the descriptors checked at once, when they were
	if pending > 1 && g.concurrent {
		ran = s.checkAll(ctx, g.store, req.GetDomain(), descs, ms, now, blocks)
	}
	quota, quotaOver, over := 0, 0, false
	for i, m := range ms {
		switch {
		case ran != nil && ran[i].ran:
			if ran[i].err != nil {
				return nil, ran[i].err
			}
			outs[i] = ran[i].out
		case m.rule == nil:
			resp.Statuses[i] = blocks[i].ok(0)
		case m.rule.unlimited:
			resp.Statuses[i] = blocks[i].ok(math.MaxUint32)
			outs[i] = outUnlimited
		default:
			out, err := s.check(ctx, g.store, req.GetDomain(), descs[i], m, now, &blocks[i])
			if err != nil {
				return nil, err
			}
			outs[i] = out
		}
		if resp.Statuses[i] == nil {
			resp.Statuses[i] = &blocks[i].st
		}
		isQuota := m.rule != nil && !m.rule.unlimited && (m.rule.quota || s.quotaMode)
		if isQuota {
			quota++
		}
		if resp.Statuses[i].Code == rlspb.RateLimitResponse_OVER_LIMIT {
			if isQuota {
				quotaOver++
			} else {
				over = true
			}
		}
	}
	// Quota descriptors deny the request only all together, as in
	// envoyproxy/ratelimit.
	if over || (quota > 0 && quota == quotaOver) {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	stats := g.stats[req.GetDomain()]
	if stats == nil {
		stats = s.m.unknown
	}
	for _, o := range outs {
		stats[o].Inc()
	}
	if g.cfg.ResponseHeaders || s.headers != nil {
		names := g.cfg.ResponseHeaderNames
		if s.headers != nil {
			names = *s.headers
		}
		quota := func(i int) bool {
			r := ms[i].rule
			return r != nil && !r.unlimited && (r.quota || s.quotaMode)
		}
		if g.cfg.ResponseHeaderFormat == HeadersDraft03 && s.headers == nil {
			resp.ResponseHeadersToAdd = draft03Headers(resp.Statuses, quota)
		} else {
			resp.ResponseHeadersToAdd = rateLimitHeaders(resp.Statuses, quota, names)
		}
	}
	if s.dynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, resp.Statuses, ms)
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && (g.cfg.ShadowMode || s.shadowMode) {
		resp.OverallCode = rlspb.RateLimitResponse_OK
		if s.peer != nil {
			s.peer.globalShadow.Add(1)
		}
	}
	return resp, nil
}

// A match is what applies to one request descriptor: its rule (nil for
// none) and the node of the descriptor tree it matched (nil for a limit
// override), with the descriptor's cost (0: check without counting).
type match struct {
	rule *rule
	node *node
	cost int64
	peek bool   // decide without counting
	key  string // the counter's key in the store
}

func (s *Service) peekAll(ms []match) {
	for i := range ms {
		ms[i].peek = true
	}
}

// storeFailed counts, logs and wraps a store failure.
func (s *Service) storeFailed(domain string, err error) error {
	if errors.Is(err, ratelimit.ErrInvalidLimit) {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	s.m.storeErrors.Inc()
	s.repeats.Error("store "+domain, "decision: store failed", "domain", domain, "err", err)
	return fmt.Errorf("decision: taking from the store: %w", err)
}

// ruleFor returns what applies to d: nothing in an unknown domain, else
// its own limit override when Envoy sent one, else the configured rule, or
// nothing.
func (s *Service) ruleFor(cfg *Config, tree *node, d *rlpb.RateLimitDescriptor) (match, error) {
	if d.GetIsNegativeHits() {
		return match{}, errors.New("is_negative_hits is not supported: the store cannot return hits")
	}
	if tree == nil {
		// An unknown domain limits nothing, not even a descriptor's own
		// limit override, as in envoyproxy/ratelimit.
		return match{}, nil
	}
	if o := d.GetLimit(); o != nil {
		u := rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
		if unitLength(u) == 0 {
			return match{}, fmt.Errorf("limit override has unknown unit %s", o.GetUnit())
		}
		spec := LimitSpec{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u, Multiplier: 1, Algorithm: cfg.Algorithm}
		if m := o.GetUnitMultiplier(); m != nil {
			if m.GetValue() == 0 {
				return match{}, errors.New("limit override unit_multiplier must be greater than 0")
			}
			spec.Multiplier = m.GetValue()
		}
		if spec.RequestsPerUnit > 0 {
			if err := spec.Limit().Validate(); err != nil {
				return match{}, fmt.Errorf("limit override: %w", err)
			}
		}
		return match{rule: compileRule(&RateLimit{Limits: []LimitSpec{spec}}, false)}, nil
	}
	entries := d.GetEntries()
	n := tree.lookup(len(entries), func(i int) (string, string) { return entries[i].GetKey(), entries[i].GetValue() })
	if n == nil {
		return match{}, nil
	}
	return match{rule: n.rule, node: n}, nil
}

// storeKey is the store's key of d in domain, matched at n (nil for a
// limit override): envoyproxy/ratelimit's with key_layout envoy, else
// counterKey.
func (g *generation) storeKey(domain string, d *rlpb.RateLimitDescriptor, n *node) string {
	if rc := &g.cfg.Store.Redis; rc.EnvoyLayout {
		return envoyKey(rc.KeyPrefix, domain, d, n)
	}
	return counterKey(domain, d, n)
}

// counterKey identifies the counter of one request descriptor. The parts
// are length-prefixed by ratelimit.Key, so no two descriptors share a key:
// envoyproxy/ratelimit joins them with "_", and there the entries
// (a_b, c) and (a, b_c) count together. An entry matched by a
// share_threshold wildcard counts under the pattern.
func counterKey(domain string, d *rlpb.RateLimitDescriptor, n *node) string {
	entries := d.GetEntries()
	var inline [10]string
	parts := append(inline[:0], keyPrefix, domain)
	for i, e := range entries {
		parts = append(parts, e.GetKey(), n.countedValue(i, e.GetKey(), e.GetValue()))
	}
	return ratelimit.Key(parts...)
}

// statName names the envoyproxy/ratelimit statistics of d matched as m,
// sanitized (sanitizeStatName).
func statName(domain string, d *rlpb.RateLimitDescriptor, m match) string {
	entries := d.GetEntries()
	entry := func(i int) (string, string) { return entries[i].GetKey(), entries[i].GetValue() }
	if m.node != nil {
		return m.node.statName(domain, len(entries), entry)
	}
	// A limit override is named by the request's values.
	var b strings.Builder
	b.WriteString(domain)
	for i := range entries {
		k, v := entry(i)
		b.WriteByte('.')
		b.WriteString(k)
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return sanitizeStatName(b.String())
}

// check counts d against m, writes its status into b and returns its
// outcome.
func (s *Service) check(ctx context.Context, store ratelimit.Store, domain string, d *rlpb.RateLimitDescriptor, m match, now time.Time, b *statusBlock) (outcome, error) {
	var req ratelimit.Request
	if out, done := s.before(domain, d, &m, now, b, &req); done {
		return out, nil
	}
	dec, err := store.Take(ctx, req)
	return s.after(domain, d, &m, now, b, &req, &dec, err)
}

// before sets req to the store request that checks d, matched as m, or
// returns with done its outcome decided without the store, its status
// written into b.
func (s *Service) before(domain string, d *rlpb.RateLimitDescriptor, m *match, now time.Time, b *statusBlock, req *ratelimit.Request) (out outcome, done bool) {
	r := m.rule
	if r.denyAll >= 0 {
		spec := r.specs[r.denyAll]
		if s.peer != nil {
			s.peer.observe(statName(domain, d, *m), 0, 0, m.cost, m.cost, false, r.shadow)
		}
		b.set(overCode(r), r.name, spec, 0, wholeSeconds(untilWindowEnd(spec.Window(), now)))
		return overOutcome(r), true
	}
	key := m.key
	peek := m.cost == 0 || m.peek
	cost := m.cost
	if cost == 0 {
		cost = 1 // would one more hit be allowed?
	}
	if s.overCache != nil && !peek {
		if reset, ok := s.overCache.over(key, now); ok {
			spec := r.specs[r.index[0]]
			if s.peer != nil {
				s.peer.observeLocalCache(statName(domain, d, *m), m.cost, r.shadow)
			}
			b.set(overCode(r), r.name, spec, 0, wholeSeconds(reset))
			return overOutcome(r), true
		}
	}
	*req = ratelimit.Request{Key: key, Limits: r.limits, Cost: cost, Now: now, Peek: peek, Penalty: s.countDenied && !peek}
	return 0, false
}

// after finishes the check of d, matched as m, with the store's answer to
// req.
func (s *Service) after(domain string, d *rlpb.RateLimitDescriptor, m *match, now time.Time, b *statusBlock, req *ratelimit.Request, dec *ratelimit.Decision, err error) (outcome, error) {
	r, key, peek, cost := m.rule, req.Key, req.Peek, req.Cost
	if err != nil {
		return 0, s.storeFailed(domain, err)
	}
	i := dec.Denied
	if i < 0 {
		i = dec.Reported()
	}
	ls := dec.State(i)
	remaining := ls.Remaining
	if peek && dec.Allowed {
		remaining += cost // the hit was only asked about
	}
	spec := r.specs[r.index[i]]
	b.set(rlspb.RateLimitResponse_OK, r.name, spec, clampUint32(remaining), wholeSeconds(ls.Reset))
	s.recordTop(domain, d, !dec.Allowed, now)
	if s.peer != nil {
		// envoyproxy/ratelimit's accounting: the hits before and after
		// this call, as if it had been added. The window that denied a
		// call reports the count the call would have reached; a bucket
		// its tokens without the call.
		after := int64(ls.Used)
		if !ls.Counted && (dec.Allowed || ls.Limit.Algorithm == ratelimit.TokenBucket) {
			after += m.cost
		}
		s.peer.observe(statName(domain, d, *m), int64(spec.RequestsPerUnit), after-m.cost, after, m.cost, dec.Allowed, r.shadow)
	}
	if !dec.Allowed {
		if s.overCache != nil && !peek {
			s.overCache.add(key, now.Add(ls.Reset))
		}
		b.st.Code = overCode(r)
		return overOutcome(r), nil
	}
	return outOK, nil
}

// A checkResult is the outcome of one descriptor checked by checkAll.
type checkResult struct {
	ran bool
	out outcome
	err error
}

// checkAll checks the descriptors of ms that have a limit at once, each
// into its block, and returns their results by index: one round trip for
// all of them instead of one each, as the Redis client pipelines calls
// made together. The last one is checked on the calling goroutine.
func (s *Service) checkAll(ctx context.Context, store ratelimit.Store, domain string, descs []*rlpb.RateLimitDescriptor, ms []match, now time.Time, blocks []statusBlock) []checkResult {
	res := make([]checkResult, len(ms))
	if mt, ok := store.(multiTaker); ok {
		s.takeAll(ctx, mt, domain, descs, ms, now, blocks, res)
		return res
	}
	last := -1
	for i := range ms {
		if m := &ms[i]; m.rule != nil && !m.rule.unlimited {
			last = i
		}
	}
	var wg sync.WaitGroup
	for i := range ms {
		if m := &ms[i]; i != last && m.rule != nil && !m.rule.unlimited {
			wg.Add(1)
			go s.checkInto(ctx, &wg, store, domain, descs[i], *m, now, &blocks[i], &res[i])
		}
	}
	s.checkInto(ctx, nil, store, domain, descs[last], ms[last], now, &blocks[last], &res[last])
	wg.Wait()
	return res
}

// A multiTaker decides several requests in one call, each as Take would
// decide it; redisstore.Store sends them in one pipeline.
type multiTaker interface {
	TakeAll(ctx context.Context, rs []ratelimit.Request, ds []ratelimit.Decision, errs []error)
}

// takeAll is checkAll over a multiTaker: every descriptor's request in
// one call, no goroutine each.
func (s *Service) takeAll(ctx context.Context, mt multiTaker, domain string, descs []*rlpb.RateLimitDescriptor, ms []match, now time.Time, blocks []statusBlock, res []checkResult) {
	var idxBuf [4]int
	idx := idxBuf[:0]
	var reqs []ratelimit.Request
	var decs []ratelimit.Decision
	var errs []error
	n := 0
	for i := range ms {
		if m := &ms[i]; m.rule != nil && !m.rule.unlimited {
			n++
		}
	}
	if n <= 2 {
		// The usual case in one allocation: the buffers escape through
		// the interface call.
		b := new(takeBufs2)
		reqs, decs, errs = b.reqs[:0], b.decs[:], b.errs[:]
	} else {
		reqs, decs, errs = make([]ratelimit.Request, 0, n), make([]ratelimit.Decision, n), make([]error, n)
	}
	for i := range ms {
		m := &ms[i]
		if m.rule == nil || m.rule.unlimited {
			continue
		}
		var req ratelimit.Request
		out, done := s.before(domain, descs[i], m, now, &blocks[i], &req)
		res[i].ran = true
		if done {
			res[i].out = out
			continue
		}
		reqs, idx = append(reqs, req), append(idx, i)
	}
	if len(reqs) == 0 {
		return
	}
	decs, errs = decs[:len(reqs)], errs[:len(reqs)]
	mt.TakeAll(ctx, reqs, decs, errs)
	for j, i := range idx {
		res[i].out, res[i].err = s.after(domain, descs[i], &ms[i], now, &blocks[i], &reqs[j], &decs[j], errs[j])
	}
}

// takeBufs2 holds the requests and answers of takeAll for two
// descriptors.
type takeBufs2 struct {
	reqs [2]ratelimit.Request
	decs [2]ratelimit.Decision
	errs [2]error
}

func (s *Service) checkInto(ctx context.Context, wg *sync.WaitGroup, store ratelimit.Store, domain string, d *rlpb.RateLimitDescriptor, m match, now time.Time, b *statusBlock, r *checkResult) {
	r.out, r.err = s.check(ctx, store, domain, d, m, now, b)
	r.ran = true
	if wg != nil {
		wg.Done()
	}
}

// A statusBlock is one descriptor's status with the messages it points
// to, so that a response's statuses are allocated together.
type statusBlock struct {
	st    rlspb.RateLimitResponse_DescriptorStatus
	limit rlspb.RateLimitResponse_RateLimit
	mult  wrapperspb.UInt32Value
	reset durationpb.Duration
}

// ok returns the block's status as OK with remaining and no limit.
func (b *statusBlock) ok(remaining uint32) *rlspb.RateLimitResponse_DescriptorStatus {
	b.st.Code, b.st.LimitRemaining = rlspb.RateLimitResponse_OK, remaining
	return &b.st
}

// set fills the block's status with spec (named name) as its current limit.
func (b *statusBlock) set(code rlspb.RateLimitResponse_Code, name string, spec LimitSpec, remaining uint32, reset time.Duration) {
	b.limit.Name, b.limit.RequestsPerUnit, b.limit.Unit = name, spec.RequestsPerUnit, spec.Unit
	if spec.Multiplier > 1 {
		b.mult.Value = spec.Multiplier
		b.limit.UnitMultiplier = &b.mult
	}
	// As durationpb.New.
	nanos := reset.Nanoseconds()
	b.reset.Seconds = nanos / 1e9
	b.reset.Nanos = int32(nanos - b.reset.Seconds*1e9)
	b.st.Code, b.st.CurrentLimit, b.st.LimitRemaining, b.st.DurationUntilReset = code, &b.limit, remaining, &b.reset
}

// A response1 is a response of one status in one allocation, a response2
// of two.
type response1 struct {
	resp   rlspb.RateLimitResponse
	sts    [1]*rlspb.RateLimitResponse_DescriptorStatus
	blocks [1]statusBlock
}

type response2 struct {
	resp   rlspb.RateLimitResponse
	sts    [2]*rlspb.RateLimitResponse_DescriptorStatus
	blocks [2]statusBlock
}

// newResponse returns an OK response with n nil statuses and a block for
// each.
func newResponse(n int) (*rlspb.RateLimitResponse, []statusBlock) {
	switch n {
	case 1:
		r := &response1{}
		r.resp.OverallCode = rlspb.RateLimitResponse_OK
		r.resp.Statuses = r.sts[:]
		return &r.resp, r.blocks[:]
	case 2:
		r := &response2{}
		r.resp.OverallCode = rlspb.RateLimitResponse_OK
		r.resp.Statuses = r.sts[:]
		return &r.resp, r.blocks[:]
	}
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, n)}, make([]statusBlock, n)
}

// wholeSeconds rounds d up to whole seconds: envoyproxy/ratelimit answers
// duration_until_reset in whole seconds, and clients (Envoy's
// x-ratelimit-reset, Retry-After) read it so.
func wholeSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

func overOutcome(r *rule) outcome {
	if r.shadow {
		return outShadow
	}
	return outOver
}

// overCode is the code of a descriptor over its limit: OK in shadow mode.
func overCode(r *rule) rlspb.RateLimitResponse_Code {
	if r.shadow {
		return rlspb.RateLimitResponse_OK
	}
	return rlspb.RateLimitResponse_OVER_LIMIT
}

func untilWindowEnd(w time.Duration, now time.Time) time.Duration {
	ms := now.UnixMilli()
	wm := w.Milliseconds()
	el := ms % wm
	if el < 0 {
		el += wm
	}
	return time.Duration(wm-el) * time.Millisecond
}

func clampUint32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// rateLimitHeaders builds envoyproxy/ratelimit's headers (RateLimit-Limit:
// 10, RateLimit-Remaining: 4, RateLimit-Reset: 58, under names) from the
// status closest to its limit (closest). It returns nil when no descriptor
// had a limit.
func rateLimitHeaders(sts []*rlspb.RateLimitResponse_DescriptorStatus, quota func(int) bool, names HeaderNames) []*corepb.HeaderValue {
	best := closest(sts, quota)
	if best == nil {
		return nil
	}
	return []*corepb.HeaderValue{
		{Key: names.Limit, Value: strconv.FormatUint(uint64(best.CurrentLimit.RequestsPerUnit), 10)},
		{Key: names.Remaining, Value: strconv.FormatUint(uint64(best.LimitRemaining), 10)},
		{Key: names.Reset, Value: ceilSeconds(best.DurationUntilReset.AsDuration())},
	}
}

// draft03Headers builds the x-ratelimit-* headers of
// draft-ietf-httpapi-ratelimit-headers-03 from the status closest to its
// limit (closest). It returns nil when no descriptor had a limit.
func draft03Headers(sts []*rlspb.RateLimitResponse_DescriptorStatus, quota func(int) bool) []*corepb.HeaderValue {
	best := closest(sts, quota)
	if best == nil {
		return nil
	}
	cl := best.CurrentLimit
	mult := uint32(1)
	if cl.UnitMultiplier != nil {
		mult = cl.UnitMultiplier.GetValue()
	}
	window := unitLength(cl.Unit) * time.Duration(mult)
	rpu := strconv.FormatUint(uint64(cl.RequestsPerUnit), 10)
	limit := rpu + ", " + rpu + ";w=" + strconv.FormatInt(int64(window/time.Second), 10)
	if cl.Name != "" {
		limit += ";name=" + sfString(cl.Name)
	}
	reset := best.DurationUntilReset.AsDuration()
	secs := int64((reset + time.Second - 1) / time.Second)
	return []*corepb.HeaderValue{
		{Key: "x-ratelimit-limit", Value: limit},
		{Key: "x-ratelimit-remaining", Value: strconv.FormatUint(uint64(best.LimitRemaining), 10)},
		{Key: "x-ratelimit-reset", Value: strconv.FormatInt(secs, 10)},
	}
}

// closest returns the status the rate-limit headers describe, as
// envoyproxy/ratelimit chooses it: the last status over its limit that is
// not a quota (quota(i) reports whether status i is; nil: none is), else
// the first of those with the least remaining. It returns nil when no
// descriptor had a limit.
func closest(sts []*rlspb.RateLimitResponse_DescriptorStatus, quota func(int) bool) *rlspb.RateLimitResponse_DescriptorStatus {
	var best *rlspb.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range sts {
		if st.CurrentLimit == nil {
			continue
		}
		if st.LimitRemaining < least {
			best, least = st, st.LimitRemaining
		}
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT && (quota == nil || !quota(i)) {
			best, least = st, 0
		}
	}
	return best
}

// sfString formats s as a structured-field string (RFC 8941): quoted, with
// backslash and double quote escaped.
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}
