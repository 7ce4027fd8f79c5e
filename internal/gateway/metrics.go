package gateway

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// Metrics are the gateway's Prometheus collectors, registered on a
// registry the caller owns (never the global default one).
type Metrics struct {
	Registry *prometheus.Registry

	requests       *prometheus.CounterVec
	decisions      *prometheus.CounterVec
	decisionTime   *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec
	clientErrors   *prometheus.CounterVec
	inflight       prometheus.Gauge
	reloads        *prometheus.CounterVec
	generation     prometheus.Gauge
	lastReload     prometheus.Gauge
	storeErrors    *prometheus.CounterVec
	redisFallback  *prometheus.GaugeVec
	redisChanges   *prometheus.CounterVec
	redisFault     *prometheus.GaugeVec
	adminActions   *prometheus.CounterVec
	// By route and service (both bounded by the configuration, never by
	// traffic), cached per route in each generation (see routeMetrics).
	requestTime  *prometheus.HistogramVec
	upstreamTime *prometheus.HistogramVec
	bytesIn      *prometheus.CounterVec
	bytesOut     *prometheus.CounterVec
	denials      *prometheus.CounterVec
	// noRoute are the children of requests no route matched.
	noRoute *routeMetrics

	redisMu    sync.Mutex
	redisState map[string]redisState // by namespace
	redisUsed  map[string]bool       // the Redis-backed namespaces in use

	kongOnce kongMetricsOnce // the prometheus plugin's
}

// redisState is a namespace's last reported Redis state.
type redisState struct {
	degraded bool
	reason   string // the fault's, "" for none
}

// NewMetrics creates the collectors and registers them, with the Go
// runtime and process collectors, on reg (a new registry when nil). It
// fails when reg already holds collectors of the same names.
func NewMetrics(reg *prometheus.Registry) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total",
			Help: "Proxied and answered requests by route, service and status code.",
		}, []string{"route", "service", "code"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_plugin_decisions_total",
			Help: "Plugin decisions by plugin and outcome (allowed, denied, unauthorized, error, ...).",
		}, []string{"plugin", "outcome"}),
		decisionTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_plugin_decision_duration_seconds",
			Help:    "Time spent in a plugin's access phase.",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .05, .25},
		}, []string{"plugin"}),
		clientErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_client_errors_total",
			Help: "Requests refused for the client's mistake, by reason (bad_request, bad_header_name, header_too_large, uri_too_long, version_not_supported, method_not_allowed, bad_body, body_too_large, bare_lf, timeout).",
		}, []string{"reason"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_errors_total",
			Help: "Failed upstream requests by service and kind (timeout, connect).",
		}, []string{"service", "kind"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_inflight_requests",
			Help: "Requests being handled, streaming responses included.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Configuration loads by source (file, admin, etcd, ...) and result (applied, rejected).",
		}, []string{"source", "result"}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_generation",
			Help: "Number of the configuration generation serving requests.",
		}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_timestamp_seconds",
			Help: "Unix time of the last applied configuration.",
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Counter store (Redis) errors seen by plugins, by plugin.",
		}, []string{"plugin"}),
		redisFallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_fallback",
			Help: "1 while a namespace's Redis is unavailable and it counts locally, 0 once Redis answers.",
		}, []string{"namespace"}),
		redisChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_state_changes_total",
			Help: "Redis state changes of the counter stores by namespace and new state (fallback, connected).",
		}, []string{"namespace", "state"}),
		redisFault: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_fault",
			Help: "1 while a namespace counts locally because Redis refuses its configuration, by reason (wrongpass, noauth, noperm, unknown_command, tls_name, tls_certificate).",
		}, []string{"namespace", "reason"}),
		adminActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admin_actions_total",
			Help: "Admin API calls that change state (reset_counter), by action and outcome (ok, not_found, error).",
		}, []string{"action", "outcome"}),
		requestTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_http_request_duration_seconds",
			Help:    "Time from reading a request to the end of its response (streamed bodies included), by route and service.",
			Buckets: latencyBuckets,
		}, []string{"route", "service"}),
		upstreamTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_upstream_duration_seconds",
			Help:    "Time from sending a request upstream to receiving its response headers, by route and service (proxied requests only).",
			Buckets: latencyBuckets,
		}, []string{"route", "service"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_request_body_bytes_total",
			Help: "Request body bytes received from clients, by route and service.",
		}, []string{"route", "service"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_response_body_bytes_total",
			Help: "Response body bytes sent to clients, by route and service.",
		}, []string{"route", "service"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rate_limit_denials_total",
			Help: "Requests a rate-limiting plugin answered with its rejection, by plugin, namespace and the window (seconds) that denied; window is empty for sluice-concurrency.",
		}, []string{"plugin", "namespace", "window"}),
		redisState: map[string]redisState{},
	}
	m.noRoute = m.routeMetrics("", "")
	for _, c := range []prometheus.Collector{m.requestTime, m.upstreamTime, m.bytesIn, m.bytesOut, m.denials, m.redisFallback, m.redisChanges, m.redisFault, m.requests, m.decisions, m.decisionTime, m.upstreamErrors, m.clientErrors,
		m.inflight, m.reloads, m.generation, m.lastReload, m.storeErrors, m.adminActions,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: registering metrics: %w", err)
		}
	}
	return m, nil
}

// latencyBuckets are the request and upstream latency buckets, seconds.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// routeMetrics are the metric children of one route and service.
type routeMetrics struct {
	requestTime, upstreamTime prometheus.Observer
	bytesIn, bytesOut         prometheus.Counter
}

func (m *Metrics) routeMetrics(route, service string) *routeMetrics {
	return &routeMetrics{
		requestTime:  m.requestTime.WithLabelValues(route, service),
		upstreamTime: m.upstreamTime.WithLabelValues(route, service),
		bytesIn:      m.bytesIn.WithLabelValues(route, service),
		bytesOut:     m.bytesOut.WithLabelValues(route, service),
	}
}

// RedisStateChanged records a change of a namespace's Redis state in the
// sluice_redis_fallback gauge (1 while degraded),
// sluice_redis_state_changes_total and, when err is a redisstore.Fault,
// sluice_redis_fault with its reason. Its signature is that of
// policy.RegistryOptions.OnRedisState, which the gateway's registry (and
// cmd/sluice's) passes it to. It is safe for concurrent use and never
// blocks.
func (m *Metrics) RedisStateChanged(namespace string, degraded bool, err error) {
	cur := redisState{degraded: degraded}
	if f := redisstore.Classify(err); f != nil && degraded {
		cur.reason = f.Reason
	}
	m.redisMu.Lock()
	defer m.redisMu.Unlock()
	prev, seen := m.redisState[namespace]
	m.redisState[namespace] = cur
	if prev.reason != "" && prev.reason != cur.reason {
		m.redisFault.DeleteLabelValues(namespace, prev.reason)
	}
	if cur.reason != "" {
		m.redisFault.WithLabelValues(namespace, cur.reason).Set(1)
	}
	if seen && prev.degraded == degraded {
		return // a new cause, not a new state
	}
	v, state := 0.0, "connected"
	if degraded {
		v, state = 1, "fallback"
	}
	m.redisFallback.WithLabelValues(namespace).Set(v)
	m.redisChanges.WithLabelValues(namespace, state).Inc()
}

// redisInUse records the Redis-backed namespaces of the configuration just
// applied: their sluice_redis_fallback series exist, at 0 until a state
// change, and those of namespaces no longer used go.
func (m *Metrics) redisInUse(namespaces map[string]bool) {
	m.redisMu.Lock()
	defer m.redisMu.Unlock()
	for ns := range m.redisUsed {
		if namespaces[ns] {
			continue
		}
		m.redisFallback.DeleteLabelValues(ns)
		if st := m.redisState[ns]; st.reason != "" {
			m.redisFault.DeleteLabelValues(ns, st.reason)
		}
		delete(m.redisState, ns)
	}
	for ns := range namespaces {
		if _, seen := m.redisState[ns]; !seen {
			m.redisFallback.WithLabelValues(ns)
		}
	}
	m.redisUsed = namespaces
}

// Register adds further collectors (the policy registry's store state, for
// instance) to the gateway's registry.
func (m *Metrics) Register(c prometheus.Collector) error { return m.Registry.Register(c) }

func (g *Gateway) requestCounter(gen *generation, ch *chain, r *kongconf.Route, route, service string, status int) prometheus.Counter {
	if ch != nil {
		for i := range ch.codes {
			cc := ch.codes[i].Load()
			if cc == nil {
				break
			}
			if cc.code == status {
				return cc.c
			}
		}
	}
	if gen == nil {
		return g.metrics.requests.WithLabelValues(route, service, strconv.Itoa(status))
	}
	k := counterKey{r, status}
	if c, ok := gen.counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := g.metrics.requests.WithLabelValues(route, service, strconv.Itoa(status))
	gen.counters.Store(k, c)
	if ch != nil {
		for i := range ch.codes {
			if ch.codes[i].CompareAndSwap(nil, &codeCounter{status, c}) || ch.codes[i].Load().code == status {
				break
			}
		}
	}
	return c
}
