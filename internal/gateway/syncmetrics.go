package gateway

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-008287da/sluice/policy"
)

// syncMetrics exports, at each scrape, the periodic sync of every Redis
// namespace with sync_rate > 0: how old its view of the other nodes'
// counts is, and the analytic bound on what that costs (docs/gateway.md,
// "Metrics").
type syncMetrics struct {
	reg *policy.Registry
	now func() time.Time

	mu       sync.Mutex
	lag      *prometheus.GaugeVec
	interval *prometheus.GaugeVec
	budget   *prometheus.GaugeVec
	samples  map[string][]decisionSample // by namespace, oldest first
}

// decisionSample is a store's decision count at one scrape.
type decisionSample struct {
	at        time.Time
	decisions uint64
}

// Rates are measured over about rateWindow, from samples at least
// sampleEvery apart (more scrapers than one do not shorten it).
const (
	rateWindow  = time.Minute
	sampleEvery = 5 * time.Second
)

func newSyncMetrics(reg *policy.Registry, now func() time.Time) *syncMetrics {
	return &syncMetrics{
		reg: reg, now: now, samples: map[string][]decisionSample{},
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_sync_lag_seconds",
			Help: "Age of the counts a periodic (sync_rate > 0) namespace last read from Redis: the time since its last completed sync cycle, or since it was opened before the first.",
		}, []string{"namespace"}),
		interval: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_sync_interval_seconds",
			Help: "sync_rate of a periodic namespace, seconds.",
		}, []string{"namespace"}),
		budget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_redis_sync_accuracy_budget",
			Help: "Bound on the requests this node may admit past a limit of a periodic namespace before it sees the other nodes' counts: its decisions per second in the namespace over the last minute times sync_rate. Sum over nodes for the cluster's bound.",
		}, []string{"namespace"}),
	}
}

// register adds m to reg; a registry that already has the sync metrics
// (a second gateway on the same Metrics) keeps the first.
func (m *syncMetrics) register(reg prometheus.Registerer) error {
	if err := reg.Register(m); err != nil {
		if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return nil
		}
		return err
	}
	return nil
}

func (m *syncMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.lag.Describe(ch)
	m.interval.Describe(ch)
	m.budget.Describe(ch)
}

func (m *syncMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.lag.Reset()
	m.interval.Reset()
	m.budget.Reset()
	// A namespace with two stores (during a reload) is reported by the
	// newer one.
	newest := map[string]policy.NamespaceSync{}
	for _, s := range m.reg.SyncTimings() {
		if cur, ok := newest[s.Namespace]; !ok || s.Opened.After(cur.Opened) {
			newest[s.Namespace] = s
		}
	}
	for ns := range m.samples {
		if _, ok := newest[ns]; !ok {
			delete(m.samples, ns)
		}
	}
	for ns, s := range newest {
		m.lag.WithLabelValues(ns).Set(s.Age(now).Seconds())
		m.interval.WithLabelValues(ns).Set(s.Interval.Seconds())
		m.budget.WithLabelValues(ns).Set(m.rate(ns, s, now) * s.Interval.Seconds())
	}
	m.lag.Collect(ch)
	m.interval.Collect(ch)
	m.budget.Collect(ch)
}

// rate returns the namespace's decisions per second over about the last
// rateWindow, and records the sample of now. Called with m.mu held.
func (m *syncMetrics) rate(ns string, s policy.NamespaceSync, now time.Time) float64 {
	h := m.samples[ns]
	if n := len(h); n > 0 && (s.Decisions < h[n-1].decisions || h[0].at.Before(s.Opened)) {
		h = nil // the store was replaced: its count started again
	}
	if n := len(h); n == 0 || now.Sub(h[n-1].at) >= sampleEvery {
		h = append(h, decisionSample{now, s.Decisions})
	}
	for len(h) > 2 && now.Sub(h[1].at) >= rateWindow {
		h = h[1:]
	}
	m.samples[ns] = h
	base := h[0]
	if now.Sub(base.at) < sampleEvery {
		base = decisionSample{s.Opened, 0} // too recent: since the store opened
	}
	secs := now.Sub(base.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(s.Decisions-base.decisions) / secs
}
