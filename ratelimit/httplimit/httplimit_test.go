package httplimit

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// t0 starts a minute, so the windows below start there too.
var t0 = time.Unix(1_700_000_040, 0)

func newServer(t *testing.T, opts Options, limits ...ratelimit.Limit) (*httptest.Server, *time.Time) {
	t.Helper()
	store := memorystore.New(memorystore.Options{})
	t.Cleanup(func() { store.Close() })
	l, err := ratelimit.NewLimiter(store, ratelimit.LimiterOptions{}, limits...)
	if err != nil {
		t.Fatal(err)
	}
	m := New(l, opts)
	now := t0
	m.now = func() time.Time { return now }
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv, &now
}

func get(t *testing.T, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestMiddlewareAnswersLikeKong(t *testing.T) {
	srv, now := newServer(t, Options{}, ratelimit.PerSecond(5), ratelimit.PerMinute(2))
	for i, want := range []string{"1", "0"} {
		res, body := get(t, srv.URL)
		if res.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
		if got := res.Header.Get("X-RateLimit-Remaining-Minute"); got != want {
			t.Fatalf("request %d: remaining-minute %q, want %q", i, got, want)
		}
	}
	*now = now.Add(30 * time.Second)
	res, body := get(t, srv.URL)
	if res.StatusCode != 429 {
		t.Fatalf("third request: status %d, want 429", res.StatusCode)
	}
	if body != `{"message":"API rate limit exceeded"}` {
		t.Fatalf("body %q", body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("content type %q", ct)
	}
	for name, want := range map[string]string{
		"X-RateLimit-Limit-Second":     "5",
		"X-RateLimit-Remaining-Second": "4", // read, not counted: the minute denied
		"X-RateLimit-Limit-Minute":     "2",
		"X-RateLimit-Remaining-Minute": "0",
		"RateLimit-Limit":              "2",
		"RateLimit-Remaining":          "0",
		// 30 s left in the minute, plus the sliding excess (3-2)/2 of 60 s.
		"RateLimit-Reset": "60",
		"Retry-After":     "60",
	} {
		if got := res.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestMiddlewareHidesHeadersAndCustomError(t *testing.T) {
	srv, _ := newServer(t, Options{HideClientHeaders: true, ErrorCode: 503, ErrorMessage: "slow down"}, ratelimit.PerMinute(1).Fixed())
	get(t, srv.URL)
	res, body := get(t, srv.URL)
	if res.StatusCode != 503 || body != `{"message":"slow down"}` {
		t.Fatalf("got %d %q", res.StatusCode, body)
	}
	for _, h := range []string{"X-RateLimit-Limit-Minute", "RateLimit-Limit", "Retry-After"} {
		if res.Header.Get(h) != "" {
			t.Errorf("%s sent although hidden", h)
		}
	}
}

func TestMiddlewareKeysByHeaderWithIPFallback(t *testing.T) {
	srv, _ := newServer(t, Options{Key: Header("X-Tenant")}, ratelimit.PerMinute(1).Fixed())
	if res, _ := get(t, srv.URL, "X-Tenant", "acme"); res.StatusCode != 200 {
		t.Fatal("acme's first request denied")
	}
	if res, _ := get(t, srv.URL, "X-Tenant", "globex"); res.StatusCode != 200 {
		t.Fatal("globex shares acme's counter")
	}
	if res, _ := get(t, srv.URL); res.StatusCode != 200 {
		t.Fatal("no tenant: the IP's first request denied")
	}
	if res, _ := get(t, srv.URL, "X-Tenant", "acme"); res.StatusCode != 429 {
		t.Fatal("acme's second request allowed")
	}
}

func TestConcurrencyReleasesWhenTheHandlerReturns(t *testing.T) {
	store := memorystore.New(memorystore.Options{})
	defer store.Close()
	entered := make(chan struct{})
	block := make(chan struct{})
	h := mustConcurrency(t, store, 1, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-block
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	done := make(chan int)
	go func() {
		res, err := http.Get(srv.URL + "/slow")
		if err != nil {
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	<-entered
	if res, _ := get(t, srv.URL+"/fast"); res.StatusCode != 429 {
		t.Fatalf("second request in flight: status %d, want 429", res.StatusCode)
	}
	close(block)
	if code := <-done; code != 200 {
		t.Fatalf("slow request: status %d", code)
	}
	if res, _ := get(t, srv.URL+"/fast"); res.StatusCode != 200 {
		t.Fatalf("after release: status %d, want 200", res.StatusCode)
	}
}

func TestConcurrencyRenewsWhileTheHandlerRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memorystore.New(memorystore.Options{})
		defer store.Close()
		const ttl = 100 * time.Millisecond
		block := make(chan struct{})
		h := mustConcurrency(t, store, 1, ttl)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-block
			}
		}))
		serve := func(path string) int {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
			return w.Code
		}
		done := make(chan int)
		go func() { done <- serve("/slow") }()
		synctest.Wait() // the slow request holds its lease and blocks
		time.Sleep(3 * ttl)
		if code := serve("/fast"); code != 429 {
			t.Fatalf("second request %s after the first began, its handler still running: status %d, want 429", 3*ttl, code)
		}
		close(block)
		if code := <-done; code != 200 {
			t.Fatalf("slow request: status %d", code)
		}
		if code := serve("/fast"); code != 200 {
			t.Fatalf("after the slow handler returned: status %d, want 200", code)
		}
	})
}

func mustConcurrency(t *testing.T, store ratelimit.LeaseStore, limit int64, ttl time.Duration) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := Concurrency(store, limit, ttl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func TestConcurrencyRefusesABadConfiguration(t *testing.T) {
	store := memorystore.New(memorystore.Options{})
	defer store.Close()
	for _, c := range []struct {
		limit int64
		ttl   time.Duration
		want  string
	}{
		{0, time.Second, "httplimit: concurrency limit must be greater than 0, got 0"},
		{-1, time.Second, "httplimit: concurrency limit must be greater than 0, got -1"},
		{1, 0, "httplimit: concurrency ttl must be a positive whole number of milliseconds, got 0s"},
		{1, 1500 * time.Microsecond, "httplimit: concurrency ttl must be a positive whole number of milliseconds, got 1.5ms"},
	} {
		mw, err := Concurrency(store, c.limit, c.ttl, Options{})
		if mw != nil || !errors.Is(err, ratelimit.ErrInvalidLimit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Concurrency(limit %d, ttl %s): err %v, want %q wrapping ErrInvalidLimit", c.limit, c.ttl, err, c.want)
		}
	}
}

func TestHeaderKeysCannotSpendAnIPsBudget(t *testing.T) {
	srv, _ := newServer(t, Options{Key: Header("X-Api-Key")}, ratelimit.PerMinute(1).Fixed())
	if res, _ := get(t, srv.URL, "X-Api-Key", "127.0.0.1"); res.StatusCode != 200 {
		t.Fatal("the key 127.0.0.1: first request denied")
	}
	if res, _ := get(t, srv.URL); res.StatusCode != 200 {
		t.Fatal("the anonymous client at 127.0.0.1 was denied: a header value spent its IP's budget")
	}
}

func TestClosedStoreIsNotFailOpen(t *testing.T) {
	store := memorystore.New(memorystore.Options{})
	l, err := ratelimit.NewLimiter(store, ratelimit.LimiterOptions{}, ratelimit.PerHour(100))
	if err != nil {
		t.Fatal(err)
	}
	quiet := Options{Logger: slog.New(slog.DiscardHandler)}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	conc, err := Concurrency(store, 1, time.Minute, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]http.Handler{"Middleware": New(l, quiet).Handler(ok), "Concurrency": conc(ok)} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 {
			t.Fatalf("%s before Close: status %d", name, w.Code)
		}
	}
	store.Close()
	for name, h := range map[string]http.Handler{"Middleware": New(l, quiet).Handler(ok), "Concurrency": conc(ok)} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 503 {
			t.Errorf("%s after the store was closed: status %d, want 503", name, w.Code)
		}
	}
}
