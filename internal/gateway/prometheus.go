package gateway

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PriorityPrometheus is Kong's prometheus PRIORITY.
const PriorityPrometheus = 13

// prometheusPlugin is Kong's prometheus plugin, serving through the
// gateway's own metrics endpoint: with status_code_metrics,
// kong_http_requests_total; with latency_metrics, kong_kong_latency_ms,
// kong_upstream_latency_ms and kong_request_latency_ms; with
// bandwidth_metrics, kong_bandwidth_bytes; per_consumer fills their
// consumer label. Kong's other metrics are not produced (docs/gateway.md
// lists them).
type prometheusPlugin struct {
	m                               *kongMetrics
	perConsumer, status, lat, bwdth bool
}

type prometheusConfig struct {
	PerConsumer           bool `json:"per_consumer"`
	StatusCodeMetrics     bool `json:"status_code_metrics"`
	LatencyMetrics        bool `json:"latency_metrics"`
	BandwidthMetrics      bool `json:"bandwidth_metrics"`
	UpstreamHealthMetrics bool `json:"upstream_health_metrics"`
	AIMetrics             bool `json:"ai_metrics"`
	WasmMetrics           bool `json:"wasm_metrics"`
}

func newPrometheus(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c prometheusConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	if env.Logger != nil {
		for name, on := range map[string]bool{"upstream_health_metrics": c.UpstreamHealthMetrics, "ai_metrics": c.AIMetrics, "wasm_metrics": c.WasmMetrics} {
			if on {
				env.Logger.Warn("prometheus: field accepted but changes nothing in sluice (docs/gateway.md)", "field", "config."+name, "at", env.Entity.Where)
			}
		}
	}
	p := &prometheusPlugin{perConsumer: c.PerConsumer, status: c.StatusCodeMetrics, lat: c.LatencyMetrics, bwdth: c.BandwidthMetrics}
	if env.Metrics != nil {
		km, err := env.Metrics.kong()
		if err != nil {
			return nil, err
		}
		p.m = km
	}
	return p, nil
}

// Access does nothing: the plugin counts in the log phase.
func (p *prometheusPlugin) Access(x *Exchange) error { return nil }

func (p *prometheusPlugin) Log(x *Exchange) {
	if p.m == nil || x.Route == nil {
		return
	}
	service := ""
	if x.Service != nil {
		service = x.Service.Name
		if service == "" {
			service = x.Service.Host
		}
	}
	route := nameOrID(x.Route.Name, x.Route.ID)
	consumer := ""
	if p.perConsumer && x.Consumer != nil {
		consumer = x.Consumer.Username
	}
	const workspace = "default"
	resp := &x.ctx.Response
	if p.status {
		source := "kong"
		if x.proxied {
			source = "service"
		}
		p.m.requests.WithLabelValues(service, route, strconv.Itoa(resp.StatusCode()), source, workspace, consumer).Inc()
	}
	if p.lat {
		total := time.Since(x.start)
		p.m.request.WithLabelValues(service, route, workspace).Observe(ms(total))
		if x.proxied {
			p.m.upstream.WithLabelValues(service, route, workspace).Observe(ms(x.upstreamLatency))
			p.m.kongLat.WithLabelValues(service, route, workspace).Observe(ms(x.proxyLatency))
		} else {
			p.m.kongLat.WithLabelValues(service, route, workspace).Observe(ms(total))
		}
	}
	if p.bwdth {
		in := len(x.ctx.Request.Header.RawHeaders()) + max(x.ctx.Request.Header.ContentLength(), 0)
		out := len(resp.Header.Header()) + max(responseBytes(resp), 0)
		if in > 0 {
			p.m.bandwidth.WithLabelValues(service, route, "ingress", workspace, consumer).Add(float64(in))
		}
		if out > 0 {
			p.m.bandwidth.WithLabelValues(service, route, "egress", workspace, consumer).Add(float64(out))
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Milliseconds()) }

// kongMetrics are the metrics of Kong's prometheus plugin, registered on
// the gateway's registry once a configuration uses the plugin.
type kongMetrics struct {
	requests                   *prometheus.CounterVec
	kongLat, upstream, request *prometheus.HistogramVec
	bandwidth                  *prometheus.CounterVec
}

// Kong's histogram buckets, in milliseconds.
var (
	kongLatencyBuckets     = []float64{1, 2, 5, 7, 10, 15, 20, 30, 50, 75, 100, 200, 500, 750, 1000, 3000, 6000}
	upstreamLatencyBuckets = []float64{25, 50, 80, 100, 250, 400, 700, 1000, 2000, 5000, 10000, 30000, 60000}
)

type kongMetricsOnce struct {
	once sync.Once
	m    *kongMetrics
	err  error
}

// kong returns the Kong metrics, registering them on first use.
func (m *Metrics) kong() (*kongMetrics, error) {
	m.kongOnce.once.Do(func() {
		km := &kongMetrics{
			requests: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "kong_http_requests_total", Help: "HTTP status codes per consumer/service/route in Kong",
			}, []string{"service", "route", "code", "source", "workspace", "consumer"}),
			kongLat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name: "kong_kong_latency_ms", Help: "Latency added by Kong and enabled plugins for each service/route in Kong",
				Buckets: kongLatencyBuckets,
			}, []string{"service", "route", "workspace"}),
			upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name: "kong_upstream_latency_ms", Help: "Latency added by upstream response for each service/route in Kong",
				Buckets: upstreamLatencyBuckets,
			}, []string{"service", "route", "workspace"}),
			request: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name: "kong_request_latency_ms", Help: "Total latency incurred during requests for each service/route in Kong",
				Buckets: upstreamLatencyBuckets,
			}, []string{"service", "route", "workspace"}),
			bandwidth: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "kong_bandwidth_bytes", Help: "Total bandwidth (ingress/egress) throughput in bytes",
			}, []string{"service", "route", "direction", "workspace", "consumer"}),
		}
		for _, c := range []prometheus.Collector{km.requests, km.kongLat, km.upstream, km.request, km.bandwidth} {
			if err := m.Registry.Register(c); err != nil {
				m.kongOnce.err = err
				return
			}
		}
		m.kongOnce.m = km
	})
	return m.kongOnce.m, m.kongOnce.err
}
