package admin

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/gateway"
	"github.com/seed-008287da/sluice/internal/testservers"
)

var screenshot = flag.String("dashboard-screenshot", "", "write a PNG of the dashboard to this file (docs/dashboard.png)")

const chromium = "/usr/bin/chromium"

const dashboardConfig = `
_format_version: "3.0"
services:
  - name: api
    url: UPSTREAM
    routes:
      - name: limited
        paths: [/limited]
        plugins:
          - name: rate-limiting-advanced
            instance_name: per-ip
            config: {limit: [2], window_size: [60], window_type: fixed, identifier: ip, strategy: local, namespace: dash}
      - name: open
        paths: [/open]
      - name: shared
        paths: [/shared]
        plugins:
          - name: rate-limiting-advanced
            instance_name: shared-per-ip
            config: {limit: [1000], window_size: [60], identifier: ip, strategy: redis, sync_rate: 0.1, namespace: dash-redis,
                     redis: {host: 127.0.0.1, port: REDIS_PORT}}
`

// TestDashboardInChromium loads the dashboard in a real headless
// Chromium: the page asks for the admin token, then shows the denials the
// test caused and the identifier they were for; its reset button resets
// the counter (read back through the counters API), and no console error
// or exception happens on the way. It fails when Chromium cannot start.
func TestDashboardInChromium(t *testing.T) {
	const token = "dashboard-test-token"
	g, proxy, adminURL := dashboardSetup(t, token)
	get := func(path string) int {
		t.Helper()
		res, err := http.Get(proxy + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if s := get("/shared"); s != 200 {
		t.Fatalf("shared: %d", s)
	}
	for i, want := range []int{200, 200, 429, 429, 429} {
		if s := get("/limited"); s != want {
			t.Fatalf("request %d: %d, want %d", i, s, want)
		}
	}

	ctx := startChromium(t)
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return // the browser closed at the end of the test
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()
	console := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(problems, "\n")
	}

	resetButton := chromedp.CSS(`#top-table button.reset[data-instance="per-ip"][data-identifier="127.0.0.1"]`)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(adminURL+"/dashboard"),
		chromedp.WaitVisible(chromedp.CSS("#token-form")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#token-save")),
		chromedp.WaitVisible(resetButton),
	); err != nil {
		t.Fatalf("dashboard: %v (console: %s)", err, console())
	}
	tokenType, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#token"), "type"))
	if err != nil || tokenType.Value != "password" {
		t.Errorf("token input type %+v %v", tokenType, err)
	}
	identifier, err := textOf(ctx, "#top-table tr:has(button[data-instance=\"per-ip\"]) td.identifier")
	if err != nil {
		t.Fatal(err)
	}
	deniedTotal, err := textOf(ctx, `#denials-table td.denials-total[data-plugin="rate-limiting-advanced"]`)
	if err != nil {
		t.Fatal(err)
	}
	if identifier != "127.0.0.1" || deniedTotal != "3" {
		t.Errorf("dashboard shows identifier %q with %q denials, want 127.0.0.1 and 3", identifier, deniedTotal)
	}
	// The periodic Redis namespace, connected, with its sync lag.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//table[@id="redis-table"]//td[text()="dash-redis"]/following-sibling::td[text()="connected"]`))); err != nil {
		t.Fatalf("redis table: %v (console: %s)", err, console())
	}
	redisRow, err := textOf(ctx, "#redis-table tbody tr")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(redisRow, "100 ms") || !strings.Contains(redisRow, "requests") {
		t.Errorf("redis row %q, want sync_rate 100 ms and an accuracy budget", redisRow)
	}
	// A rejected reload appears in the history with its error.
	if err := g.Load([]byte("_format_version: \"3.0\"\nservices: [{name: broken, url: 'not a url'}]\n"), "admin"); err == nil {
		t.Fatal("a broken configuration was applied")
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#reloads-table td.result-rejected"))); err != nil {
		t.Fatalf("reload history: %v (console: %s)", err, console())
	}
	reloadRow, err := textOf(ctx, "#reloads-table tbody tr")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reloadRow, "admin") || !strings.Contains(reloadRow, "services[0].url") {
		t.Errorf("newest reload row %q, want the admin source and the field in error", reloadRow)
	}
	if *screenshot != "" {
		takeScreenshot(t, ctx, get)
	}

	// The counter is there before the reset and gone after it.
	counter := adminURL + "/rate-limiting/plugins/per-ip/counters/127.0.0.1"
	if s := adminGet(t, counter, token); s != 200 {
		t.Fatalf("counter before the reset: %d", s)
	}
	// Clicked from the page's own script: the row may be redrawn between
	// finding the button and a click by coordinates.
	if err := chromedp.Do(ctx,
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.querySelector('#top-table button.reset[data-instance="per-ip"][data-identifier="127.0.0.1"]').click(), true)`))
			return err
		}),
		chromedp.WaitVisible(chromedp.Search(`//button[@data-instance="per-ip" and @data-identifier="127.0.0.1" and text()="Reset done"]`)),
	); err != nil {
		t.Fatalf("reset: %v (console: %s)", err, console())
	}
	if s := adminGet(t, counter, token); s != 404 {
		t.Errorf("counter after the reset: %d, want 404 (nothing counted)", s)
	}
	if s := get("/limited"); s != 200 {
		t.Errorf("request after the reset: %d, want 200", s)
	}
	// A last poll after the reset, so that its messages are in.
	if err := waitPolls(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if c := console(); c != "" {
		t.Errorf("the page logged:\n%s", c)
	}
}

// TestDashboardShell: the page and its assets are served without the
// token, with a content security policy and no framing; the data the page
// reads is not.
func TestDashboardShell(t *testing.T) {
	const token = "shell-token"
	_, _, adminURL := dashboardSetup(t, token)
	for _, path := range []string{"/dashboard", "/dashboard/", "/dashboard/assets/dashboard.js", "/dashboard/assets/dashboard.css"} {
		res, err := http.Get(adminURL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			res.Header.Get("X-Frame-Options") != "DENY" || res.Header.Get("Set-Cookie") != "" {
			t.Errorf("GET %s: %d %v", path, res.StatusCode, res.Header)
		}
	}
	for _, path := range []string{"/dashboard/data", "/config/reloads", "/dashboard/../config", "/dashboard/assets/../../config"} {
		if s := adminGet(t, adminURL+path, ""); s != 401 {
			t.Errorf("GET %s without the token: %d, want 401", path, s)
		}
	}
	if s := adminGet(t, adminURL+"/dashboard/data", token); s != 200 {
		t.Errorf("GET /dashboard/data with the token: %d", s)
	}
}

func adminGet(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(TokenHeader, token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// dashboardSetup serves dashboardConfig and an admin API with token on
// loopback sockets, and returns their base URLs.
func dashboardSetup(t *testing.T, token string) (g *gateway.Gateway, proxy, admin string) {
	t.Helper()
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(uln) }()
	t.Cleanup(func() { _ = up.Close() })
	g, err = gateway.New(gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs := testservers.Redis(t, testservers.RedisOptions{})
	cfg := strings.NewReplacer("UPSTREAM", "http://"+uln.Addr().String(), "REDIS_PORT", strconv.Itoa(rs.Port())).Replace(dashboardConfig)
	if err := g.Load([]byte(cfg), "test"); err != nil {
		t.Fatal(err)
	}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(pln) }()
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm := &http.Server{Handler: Handler(g, Options{Version: "test", Token: token, AllowedHosts: adminauth.LoopbackHosts(aln.Addr().String())})}
	go func() { _ = adm.Serve(aln) }()
	t.Cleanup(func() {
		_ = adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-done
	})
	return g, "http://" + pln.Addr().String(), "http://" + aln.Addr().String()
}

// startChromium starts headless Chromium with a fresh profile and returns
// a browser context (a tab). Chromium's own network traffic (updates,
// sync) is turned off: on a closed network its refused connections would
// otherwise be the page's.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("Chromium is needed at %s (Debian's chromium package; scripts/check installs it): %v", chromium, err)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1400, 1300),
	)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// textOf returns the text of the element sel finds, read in one step:
// the page replaces its rows at every poll, so a node found by one call
// may be gone by the next.
func textOf(ctx context.Context, sel string) (string, error) {
	q, _ := json.Marshal(sel) // a string always marshals
	return chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {}).textContent || ""`, q)))
}

// polls returns how many polls the page has rendered.
func polls(ctx context.Context) (int, error) {
	a, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("body"), "data-polls"))
	if err != nil {
		return 0, err
	}
	n, _ := strconv.Atoi(a.Value)
	return n, nil
}

// waitPolls waits until the page has rendered n more polls.
func waitPolls(ctx context.Context, n int) error {
	start, err := polls(ctx)
	if err != nil {
		return err
	}
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf("Number(document.body.dataset.polls) >= %d", start+n)))
	return err
}

// takeScreenshot sends traffic for a few polls, so that the charts have
// lines, and writes a PNG of the page to the -dashboard-screenshot file.
func takeScreenshot(t *testing.T, ctx context.Context, get func(string) int) {
	t.Helper()
	start, err := polls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for n := start; n < start+10; {
		for range 20 {
			get("/open")
		}
		get("/shared")
		get("/limited")
		if n, err = polls(ctx); err != nil {
			t.Fatal(err)
		}
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
