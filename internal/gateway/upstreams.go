package gateway

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// errNoPeer is the answer of an upstream without a healthy target: Kong's
// 503 "failure to get a peer from the ring-balancer".
var errNoPeer = errors.New("failure to get a peer from the ring-balancer")

// doUpstream sends the prepared request to the service: to its address,
// or, for a service whose host names an upstream, to the upstream's
// targets, retrying another target up to the service's retries.
func (g *Gateway) doUpstream(ctx *fasthttp.RequestCtx, x *Exchange, uresp *fasthttp.Response) error {
	svc := x.Service
	var b *balancer
	if svc.Upstream != nil && x.gen != nil {
		b = x.gen.balancers[svc.Upstream]
	}
	if b == nil {
		return g.upstream(x.gen, svc).Do(&ctx.Request, uresp)
	}
	up := b.up
	key, cookie := hashKey(up, x)
	client := svc.ClientCertificate
	if client == nil {
		client = up.ClientCertificate
	}
	trust := g.trustKeyFor(svc, client)
	var triedBuf [4]*target
	tried := triedBuf[:0]
	var err error
	for attempt := 0; attempt <= svc.Retries; attempt++ {
		t := b.pick(key, tried)
		if t == nil {
			if err == nil {
				err = errNoPeer
			}
			return err
		}
		tried = append(tried, t)
		if !x.Route.PreserveHost {
			host := t.t.Host
			if up.HostHeader != "" {
				host = up.HostHeader
			} else if (svc.Protocol == "http" && t.t.Port != 80) || (svc.Protocol == "https" && t.t.Port != 443) {
				host = t.addr
			}
			ctx.Request.URI().SetHost(host)
			ctx.Request.Header.SetHost(host)
		}
		sni := t.t.Host
		if up.HostHeader != "" {
			sni = up.HostHeader
		}
		hc := g.upstreamForKey(upstreamKey{addr: t.addr, tls: svc.Protocol == "https", verify: svc.TLSVerify, sni: sni,
			connect: svc.ConnectTimeout, read: svc.ReadTimeout, write: svc.WriteTimeout, retries: 1, trust: trust})
		t.active.Add(1)
		sent := time.Now()
		err = hc.Do(&ctx.Request, uresp)
		t.active.Add(-1)
		ph := &up.Healthchecks.Passive
		if err == nil {
			t.observeLatency(time.Since(sent))
			if ph.Type != "tcp" {
				g.reportHealth(b, t, byPassive, statusOutcome(uresp.StatusCode(), ph.Healthy.HTTPStatuses, ph.Unhealthy.HTTPStatuses))
			} else {
				g.reportHealth(b, t, byPassive, outcomeSuccess)
			}
			if cookie != "" {
				c := fasthttp.AcquireCookie()
				c.SetKey(up.HashOnCookie)
				c.SetValue(cookie)
				c.SetPath(up.HashOnCookiePath)
				c.SetHTTPOnly(true)
				uresp.Header.SetCookie(c)
				fasthttp.ReleaseCookie(c)
			}
			return nil
		}
		timeout := isTimeout(err) || errors.Is(err, fasthttp.ErrTimeout)
		if timeout {
			g.reportHealth(b, t, byPassive, outcomeTimeout)
		} else {
			g.reportHealth(b, t, byPassive, outcomeTCPFailure)
		}
		var de *dialError
		notSent := errors.As(err, &de)
		if !notSent && (ctx.Request.IsBodyStream() || !idempotent(ctx.Request.Header.Method())) {
			return err // may have reached the target: not sent twice (nginx's non_idempotent)
		}
		uresp.Reset()
	}
	return err
}

func idempotent(m []byte) bool {
	switch string(m) {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
		return true
	}
	return false
}

// reportHealth counts an outcome for a check and logs a change of health.
func (g *Gateway) reportHealth(b *balancer, t *target, by int, o outcome) {
	hc := &b.up.Healthchecks
	healthy, unhealthy := hc.Passive.Healthy, hc.Passive.Unhealthy
	if by == byActive {
		healthy, unhealthy = hc.Active.Healthy, hc.Active.Unhealthy
	}
	if t.report(by, o, healthy, unhealthy) {
		state := "unhealthy"
		if t.healthy.Load() {
			state = "healthy"
		}
		check := "passive"
		if by == byActive {
			check = "active"
		}
		g.log.Warn("upstream target health changed", "upstream", b.up.Name, "target", t.addr, "health", state, "check", check)
		v := 0.0
		if t.healthy.Load() {
			v = 1
		}
		g.targetHealth.WithLabelValues(b.up.Name, t.addr).Set(v)
	}
}

// buildBalancers makes the balancer of every upstream a service uses.
func buildBalancers(cfg *kongconf.Config) map[*kongconf.Upstream]*balancer {
	m := make(map[*kongconf.Upstream]*balancer, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		m[u] = newBalancer(u)
	}
	return m
}

// newTargetHealthGauge registers sluice_upstream_target_health on reg,
// or returns the one registered already.
func newTargetHealthGauge(reg *prometheus.Registry) *prometheus.GaugeVec {
	gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_upstream_target_health",
		Help: "Health of an upstream target as the health checks see it: 1 healthy, 0 unhealthy (set at a change).",
	}, []string{"upstream", "target"})
	if err := reg.Register(gv); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
				return old
			}
		}
	}
	return gv
}

// tunnelAddr is where an upgraded connection goes: a target picked by the
// upstream's balancer, or the service's address.
func (g *Gateway) tunnelAddr(x *Exchange) string {
	svc := x.Service
	if svc.Upstream != nil && x.gen != nil {
		if b := x.gen.balancers[svc.Upstream]; b != nil {
			key, _ := hashKey(b.up, x)
			if t := b.pick(key, nil); t != nil {
				return t.addr
			}
		}
	}
	return svc.Addr()
}
