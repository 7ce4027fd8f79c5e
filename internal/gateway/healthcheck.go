package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// A Ticker delivers ticks on C until Stop; time.Ticker is one. Tests
// inject their own to run health checks without waiting.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

type timeTicker struct{ t *time.Ticker }

func (t timeTicker) C() <-chan time.Time { return t.t.C }
func (t timeTicker) Stop()               { t.t.Stop() }

func newTimeTicker(d time.Duration) Ticker { return timeTicker{time.NewTicker(d)} }

// checkers are the active health checks of one generation, started when
// it begins serving and stopped when it is replaced.
type checkers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (c *checkers) stop() {
	if c == nil {
		return
	}
	c.cancel()
	c.wg.Wait()
}

// startHealthChecks starts the active checks of every balancer whose
// healthy or unhealthy interval is set.
func (g *Gateway) startHealthChecks(gen *generation) *checkers {
	ctx, cancel := context.WithCancel(context.Background())
	cs := &checkers{cancel: cancel}
	newTicker := g.opts.HealthCheckTicker
	if newTicker == nil {
		newTicker = newTimeTicker
	}
	for _, b := range gen.balancers {
		a := &b.up.Healthchecks.Active
		for _, side := range []struct {
			interval time.Duration
			healthy  bool
		}{{a.Healthy.Interval, true}, {a.Unhealthy.Interval, false}} {
			if side.interval <= 0 || len(b.targets) == 0 {
				continue
			}
			tk := newTicker(side.interval)
			cs.wg.Go(func() {
				defer tk.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tk.C():
						g.probeAll(ctx, b, side.healthy)
					}
				}
			})
		}
	}
	return cs
}

// probeAll probes the targets now in the given health, at most
// concurrency at a time, and waits for them.
func (g *Gateway) probeAll(ctx context.Context, b *balancer, healthy bool) {
	a := &b.up.Healthchecks.Active
	sem := make(chan struct{}, max(1, a.Concurrency))
	var wg sync.WaitGroup
	for _, t := range b.targets {
		if t.healthy.Load() != healthy {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			g.reportHealth(b, t, byActive, probe(ctx, b, t))
		})
	}
	wg.Wait()
}

// probe checks one target: a TCP connection (type tcp), or a GET of
// http_path whose status is classified by the check's lists.
func probe(ctx context.Context, b *balancer, t *target) outcome {
	a := &b.up.Healthchecks.Active
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if a.Type == "tcp" {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", t.addr)
		if err != nil {
			return failureOutcome(err)
		}
		_ = c.Close()
		return outcomeSuccess
	}
	scheme := "http"
	tr := &http.Transport{DisableKeepAlives: true}
	if a.Type == "https" {
		scheme = "https"
		sni := a.HTTPSSNI
		if sni == "" {
			sni = t.t.Host
		}
		tr.TLSClientConfig = &tls.Config{ServerName: sni, MinVersion: tls.VersionTLS12, InsecureSkipVerify: !a.HTTPSVerifyCertificate} //nolint:gosec // https_verify_certificate: false
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+t.addr+a.HTTPPath, nil)
	if err != nil {
		return outcomeTCPFailure
	}
	req.Host = t.t.Host
	if b.up.HostHeader != "" {
		req.Host = b.up.HostHeader
	}
	for k, vs := range a.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		return failureOutcome(err)
	}
	_ = res.Body.Close()
	return statusOutcome(res.StatusCode, a.Healthy.HTTPStatuses, a.Unhealthy.HTTPStatuses)
}

func failureOutcome(err error) outcome {
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return outcomeTimeout
	}
	return outcomeTCPFailure
}
