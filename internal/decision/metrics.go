package decision

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// An outcome is what happened to one request descriptor.
type outcome uint8

const (
	outNoLimit   outcome = iota // nothing configured matched (or replaced)
	outUnlimited                // an unlimited descriptor
	outOK                       // counted, within the limit
	outOver                     // over the limit
	outShadow                   // over the limit in shadow mode: answered OK
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"no_limit", "unlimited", "ok", "over_limit", "shadow_over_limit"}

// metrics are the service's Prometheus collectors, registered on a
// registry the service owns or the caller gave (never the global one).
type metrics struct {
	reg         *prometheus.Registry
	descriptors *prometheus.CounterVec
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	reloads     *prometheus.CounterVec
	generation  prometheus.Gauge
	storeErrors prometheus.Counter
	// adminActions counts calls that change state (counter resets).
	adminActions *prometheus.CounterVec
	// The Redis store's state, as the gateway exports it.
	redisFallback *prometheus.GaugeVec
	redisChanges  *prometheus.CounterVec
	redisFault    *prometheus.GaugeVec
	redisMu       sync.Mutex
	redisSeen     bool   // a state was reported
	redisDegraded bool   // counting locally
	redisReason   string // the fault's reason while degraded by one
	// unknown counts descriptors of domains the configuration lacks, under
	// one label, so clients cannot grow the label set.
	unknown *domainStats
	// The children of requests and duration, resolved once.
	reqCount [numTransports][numResults]prometheus.Counter
	reqTime  [numTransports]prometheus.Observer
}

type transport uint8

const (
	viaGRPC transport = iota
	viaHTTP
	numTransports
)

var transportNames = [numTransports]string{"grpc", "http"}

type result uint8

const (
	resOK result = iota
	resOver
	resInvalid
	resError
	numResults
)

var resultNames = [numResults]string{"ok", "over_limit", "invalid", "error"}

// domainStats are the descriptor counters of one domain, resolved once
// per configuration so a decision does no label lookup.
type domainStats [numOutcomes]prometheus.Counter

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		reg: reg,
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decision_descriptors_total",
			Help: "Request descriptors by domain (\"(unknown)\" for domains not configured) and outcome (ok, over_limit, shadow_over_limit, unlimited, no_limit).",
		}, []string{"domain", "outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decision_requests_total",
			Help: "Rate limit requests by transport (grpc, http) and result (ok, over_limit, invalid, error).",
		}, []string{"transport", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_decision_duration_seconds",
			Help:    "Time to decide a rate limit request, store included, by transport.",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .1},
		}, []string{"transport"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decision_config_reloads_total",
			Help: "Configuration reloads by result (applied, rejected).",
		}, []string{"result"}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_decision_config_generation",
			Help: "Number of the configuration generation in use.",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_decision_store_errors_total",
			Help: "Counter store failures; each fails its request.",
		}),
		adminActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decision_admin_actions_total",
			Help: "Calls that change state (reset_counter), by action and outcome (ok, not_found: nothing held, error).",
		}, []string{"action", "outcome"}),
		redisFallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_fallback",
			Help: "1 while the Redis store is unavailable and the service counts locally, 0 once Redis answers.",
		}, []string{"namespace"}),
		redisChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_state_changes_total",
			Help: "Redis state changes of the counter store by namespace and new state (fallback, connected).",
		}, []string{"namespace", "state"}),
		redisFault: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_fault",
			Help: "1 while the service counts locally because Redis refuses its configuration, by reason (wrongpass, noauth, noperm, unknown_command, tls_name, tls_certificate).",
		}, []string{"namespace", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.descriptors, m.requests, m.duration, m.reloads, m.generation, m.storeErrors, m.adminActions,
		m.redisFallback, m.redisChanges, m.redisFault} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("decision: registering metrics: %w", err)
		}
	}
	m.unknown = m.domain("(unknown)")
	for t := range numTransports {
		for r := range numResults {
			m.reqCount[t][r] = m.requests.WithLabelValues(transportNames[t], resultNames[r])
		}
		m.reqTime[t] = m.duration.WithLabelValues(transportNames[t])
	}
	return m, nil
}

func (m *metrics) domain(name string) *domainStats {
	var d domainStats
	for o := range numOutcomes {
		d[o] = m.descriptors.WithLabelValues(name, outcomeNames[o])
	}
	return &d
}

// observe records one request's result and duration.
func (m *metrics) observe(t transport, start time.Time, resp *rlspb.RateLimitResponse, err error) {
	r := resOK
	switch {
	case errors.Is(err, ErrInvalidRequest):
		r = resInvalid
	case err != nil:
		r = resError
	case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
		r = resOver
	}
	m.reqCount[t][r].Inc()
	m.reqTime[t].Observe(time.Since(start).Seconds())
}

// redisStateChanged returns the Redis store's Options.OnStateChange: it
// keeps sluice_redis_fallback (1 while the store counts locally),
// sluice_redis_state_changes_total and sluice_redis_fault (the reason of
// a redisstore.Fault while it lasts), as the gateway does. A probe is not
// a change: its outcome is. sluice_redis_fallback exists, at 0, from the
// store's opening.
func (m *metrics) redisStateChanged(namespace string) func(from, to redisstore.State, err error) {
	m.redisFallback.WithLabelValues(namespace)
	return func(_, to redisstore.State, err error) {
		if to == redisstore.StateProbing {
			return
		}
		degraded := to != redisstore.StateConnected
		reason := ""
		if f := redisstore.Classify(err); f != nil && degraded {
			reason = f.Reason
		}
		m.redisMu.Lock()
		defer m.redisMu.Unlock()
		if m.redisReason != "" && m.redisReason != reason {
			m.redisFault.DeleteLabelValues(namespace, m.redisReason)
		}
		if reason != "" {
			m.redisFault.WithLabelValues(namespace, reason).Set(1)
		}
		m.redisReason = reason
		if m.redisSeen && m.redisDegraded == degraded {
			return // a new cause, not a new state
		}
		m.redisSeen, m.redisDegraded = true, degraded
		v, state := 0.0, "connected"
		if degraded {
			v, state = 1, "fallback"
		}
		m.redisFallback.WithLabelValues(namespace).Set(v)
		m.redisChanges.WithLabelValues(namespace, state).Inc()
	}
}

// Registry returns the registry the service's metrics are registered on.
func (s *Service) Registry() *prometheus.Registry { return s.m.reg }

func (s *Service) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{Registry: s.m.reg})
}
