// Package httplimit is net/http middleware over the ratelimit SDK, for a Go
// service that limits its own callers without any gateway. It answers the
// way Kong's rate-limiting-advanced plugin does: X-RateLimit-Limit-<window>
// and X-RateLimit-Remaining-<window> per limit, RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset for the tightest limit, and on
// denial status 429, Retry-After and the body
// {"message":"API rate limit exceeded"}.
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/seed-008287da/sluice/internal/kongname"
	"github.com/seed-008287da/sluice/ratelimit"
)

// A KeyFunc returns the key a request is counted under. ok false means the
// request is not limited.
type KeyFunc func(r *http.Request) (key string, ok bool)

// PeerIP keys requests by the IP address of the TCP peer. It never trusts
// forwarding headers: behind a proxy, use a KeyFunc that knows which proxies
// to believe.
func PeerIP(r *http.Request) (string, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr, r.RemoteAddr != ""
	}
	return host, true
}

// Header keys requests by the first value of the named header; requests
// without it are keyed by PeerIP, as Kong falls back to the IP. The two
// kinds of key never collide: a header value is keyed as
// ratelimit.Key("header", name, value) and the IP as ratelimit.Key("ip",
// ip), so a client that sends another client's IP as its header value
// spends its own budget, not that IP's.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		if v := r.Header.Get(name); v != "" {
			return ratelimit.Key("header", name, v), true
		}
		ip, ok := PeerIP(r)
		return ratelimit.Key("ip", ip), ok
	}
}

// Options configures Middleware. The zero value of every field is its
// default.
type Options struct {
	// Key selects the counted key. Nil means PeerIP.
	Key KeyFunc
	// HideClientHeaders suppresses every rate-limit header, Retry-After
	// included (Kong's hide_client_headers).
	HideClientHeaders bool
	// ErrorCode is the status of denied requests. Zero means 429.
	ErrorCode int
	// ErrorMessage is the message of the JSON body of denied requests. Empty
	// means "API rate limit exceeded".
	ErrorMessage string
	// Logger receives store failures. Nil means slog.Default().
	Logger *slog.Logger
}

// Middleware limits requests with a Limiter. A store failure lets the
// request through without rate-limit headers and is logged: a broken
// counter store must not take the service down. A closed store
// (ratelimit.ErrClosed) is not a failure but a shut-down limiter: its
// requests get 503, so that limiting does not silently stop.
//
// Middleware is safe for concurrent use.
type Middleware struct {
	limiter *ratelimit.Limiter
	key     KeyFunc
	opts    Options
	body    []byte
	now     func() time.Time
}

// New returns middleware limiting with l.
func New(l *ratelimit.Limiter, opts Options) *Middleware {
	if opts.Key == nil {
		opts.Key = PeerIP
	}
	if opts.ErrorCode == 0 {
		opts.ErrorCode = http.StatusTooManyRequests
	}
	if opts.ErrorMessage == "" {
		opts.ErrorMessage = "API rate limit exceeded"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	body, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{opts.ErrorMessage})
	return &Middleware{limiter: l, key: opts.Key, opts: opts, body: body, now: time.Now}
}

// Handler wraps next.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := m.key(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		d, err := m.limiter.AllowN(r.Context(), key, 1, m.now())
		if err != nil {
			m.failed(w, r, next, "httplimit: deciding request", key, err)
			return
		}
		if !m.opts.HideClientHeaders {
			WriteHeaders(w.Header(), &d)
		}
		if !d.Allowed {
			h := w.Header()
			h.Set("Content-Type", "application/json; charset=utf-8")
			h.Set("Content-Length", strconv.Itoa(len(m.body)))
			w.WriteHeader(m.opts.ErrorCode)
			_, _ = w.Write(m.body)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// failed handles a request whose decision failed with err: it is logged
// and let through, unless the store is closed (503).
func (m *Middleware) failed(w http.ResponseWriter, r *http.Request, next http.Handler, msg, key string, err error) {
	m.opts.Logger.Error(msg, "key", key, "err", err)
	if errors.Is(err, ratelimit.ErrClosed) {
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	next.ServeHTTP(w, r)
}

// WriteHeaders sets Kong's rate-limit headers for d on h: a limit and
// remaining pair per limit (a later limit of the same window overwrites an
// earlier one, as in Kong), the RateLimit-* trio for the limit Reported
// chooses and, when d denies, Retry-After.
//
// Retry-After is Kong's: the RateLimit-Reset of the reported limit (when
// its current window ends), or d.RetryAfter rounded up if that is later.
// With a sliding window the wait it announces can be longer than needed,
// by up to a window; d.RetryAfter is the shortest wait that can succeed.
func WriteHeaders(h http.Header, d *ratelimit.Decision) {
	for i := 0; i < d.Len(); i++ {
		s := d.State(i)
		name := kongname.Window(s.Limit.Window)
		h["X-Ratelimit-Limit-"+name] = []string{strconv.FormatInt(s.Limit.Count, 10)}
		h["X-Ratelimit-Remaining-"+name] = []string{strconv.FormatInt(s.Remaining, 10)}
	}
	i := d.Reported()
	if i < 0 {
		return
	}
	s := d.State(i)
	reset := Seconds(s.Reset)
	h["Ratelimit-Limit"] = []string{strconv.FormatInt(s.Limit.Count, 10)}
	h["Ratelimit-Remaining"] = []string{strconv.FormatInt(s.Remaining, 10)}
	h["Ratelimit-Reset"] = []string{strconv.FormatInt(reset, 10)}
	if !d.Allowed {
		retry := reset
		if d.RetryAfter != ratelimit.InfDuration {
			retry = max(retry, Seconds(d.RetryAfter))
		}
		h["Retry-After"] = []string{strconv.FormatInt(retry, 10)}
	}
}

// Seconds rounds d up to whole seconds, at least 1, as Kong reports resets.
func Seconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// Concurrency returns middleware that lets at most limit requests per key be
// in flight at once, for long-lived and long-poll requests. Each request
// holds a lease for as long as the handler runs: the lease is renewed every
// ttl/2 while it runs and released when it returns. ttl bounds a lease
// whose holder died without releasing it. Requests over the bound get 429
// with Kong's JSON body.
//
// limit must be positive and ttl a positive whole number of milliseconds;
// otherwise Concurrency returns an error wrapping ratelimit.ErrInvalidLimit
// that names the argument, as NewLimiter does for an invalid limit.
func Concurrency(store ratelimit.LeaseStore, limit int64, ttl time.Duration, opts Options) (func(http.Handler) http.Handler, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: httplimit: concurrency limit must be greater than 0, got %d", ratelimit.ErrInvalidLimit, limit)
	}
	if ttl <= 0 || ttl%time.Millisecond != 0 {
		return nil, fmt.Errorf("%w: httplimit: concurrency ttl must be a positive whole number of milliseconds, got %s", ratelimit.ErrInvalidLimit, ttl)
	}
	m := New(nil, opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := m.key(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			id := ratelimit.NewLeaseID()
			lease, err := store.Acquire(r.Context(), ratelimit.LeaseRequest{Key: key, ID: id, Max: limit, TTL: ttl, Now: m.now()})
			if err != nil {
				m.failed(w, r, next, "httplimit: acquiring lease", key, err)
				return
			}
			if !lease.Allowed {
				h := w.Header()
				if !m.opts.HideClientHeaders {
					h.Set("Retry-After", strconv.FormatInt(Seconds(lease.RetryAfter), 10))
				}
				h.Set("Content-Type", "application/json; charset=utf-8")
				w.WriteHeader(m.opts.ErrorCode)
				_, _ = w.Write(m.body)
				return
			}
			stop := make(chan struct{})
			renewed := make(chan struct{})
			go m.renew(store, r.Context(), ratelimit.LeaseRequest{Key: key, ID: id, Max: limit, TTL: ttl}, stop, renewed)
			defer func() {
				close(stop)
				<-renewed
				// The request context is done when the client left: release
				// with a context of our own.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), releaseTimeout)
				defer cancel()
				if err := store.Release(ctx, key, id); err != nil {
					m.opts.Logger.Error("httplimit: releasing lease", "key", key, "err", err)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}, nil
}

// renew renews lease lr every lr.TTL/2 until stop is closed, then closes
// done. A renewal the store refuses (the lease lapsed and its slot was
// taken) or fails is logged; the handler runs on.
func (m *Middleware) renew(store ratelimit.LeaseStore, ctx context.Context, lr ratelimit.LeaseRequest, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(lr.TTL / 2)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		lr.Now = m.now()
		l, err := store.Acquire(ctx, lr)
		switch {
		case err != nil:
			m.opts.Logger.Error("httplimit: renewing lease", "key", lr.Key, "err", err)
		case !l.Allowed:
			m.opts.Logger.Warn("httplimit: lease lapsed before its renewal", "key", lr.Key)
		}
	}
}

// releaseTimeout bounds the release of a lease after its request ended.
const releaseTimeout = 2 * time.Second
