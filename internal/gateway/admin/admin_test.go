package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway"
)

func setup(t *testing.T, config string) (*gateway.Gateway, string, string, *httptest.Server) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.URL.Path)
	}))
	t.Cleanup(up.Close)
	g, err := gateway.New(gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Load([]byte(strings.ReplaceAll(config, "UPSTREAM", up.URL)), "test"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	adm := httptest.NewServer(Handler(g, Options{Version: "test"}))
	t.Cleanup(func() {
		adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-done
	})
	return g, "http://" + ln.Addr().String(), adm.URL, up
}

const v1 = `
_format_version: "3.0"
services: [{name: s, url: UPSTREAM/v1, routes: [{name: r, paths: [/]}]}]
`

func post(t *testing.T, url, contentType string, body []byte) (int, map[string]any) {
	t.Helper()
	res, err := http.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, m
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestPostConfigForms(t *testing.T) {
	_, proxy, adm, up := setup(t, v1)
	v2 := strings.ReplaceAll(strings.ReplaceAll(v1, "/v1", "/v2"), "UPSTREAM", up.URL)
	v3 := strings.ReplaceAll(v2, "/v2", "/v3")
	v4 := strings.ReplaceAll(v2, "/v2", "/v4")

	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("config", "kong.yml")
	_, _ = fw.Write([]byte(v2))
	_ = mw.Close()
	wrapped, _ := json.Marshal(map[string]string{"config": v4})
	steps := []struct {
		ct   string
		body []byte
		want string
	}{
		{mw.FormDataContentType(), mp.Bytes(), "/v2/x"},
		{"application/x-www-form-urlencoded", []byte("config=" + url.QueryEscape(v3)), "/v3/x"},
		{"application/json", wrapped, "/v4/x"},
		{"application/x-yaml", []byte(v1), "/v1/x"}, // UPSTREAM not replaced: must fail below
	}
	for i, s := range steps[:3] {
		code, m := post(t, adm+"/config", s.ct, s.body)
		if code != 201 {
			t.Fatalf("step %d: %d %v", i, code, m)
		}
		if _, body := get(t, proxy+"/x"); body != s.want {
			t.Errorf("step %d: proxied to %q, want %q", i, body, s.want)
		}
	}
	code, _ := post(t, adm+"/config", steps[3].ct, steps[3].body)
	if code != 400 {
		t.Errorf("config with a bad url: %d, want 400", code)
	}
	if _, body := get(t, proxy+"/x"); body != "/v4/x" {
		t.Errorf("after a rejected config: proxied to %q, want the previous /v4/x", body)
	}
	// check_hash=1, as in Kong: the configuration in force posted again is
	// a 304; without the flag, or with another configuration, a 201.
	for _, c := range []struct {
		query string
		body  []byte
		want  int
	}{
		{"?check_hash=1", wrapped, 304},
		{"", wrapped, 201},
		{"?check_hash=1", []byte(strings.ReplaceAll(v3, "/v3", "/v5")), 201},
	} {
		res, err := http.Post(adm+"/config"+c.query, "application/json", bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("POST /config%s: %d, want %d", c.query, res.StatusCode, c.want)
		}
	}
	big := bytes.Repeat([]byte("#"), MaxConfigSize+1)
	if code, m := post(t, adm+"/config", "application/yaml", big); code != 413 {
		t.Errorf("a body past MaxConfigSize: %d %v, want 413", code, m)
	}
}

func TestPostConfigErrors(t *testing.T) {
	_, proxy, adm, _ := setup(t, v1)
	bad := `
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:1
    colour: red
    routes: [{paths: [nope]}]
plugins:
  - name: no-such-plugin
  - name: rate-limiting-advanced
    config: {limit: [1, 2], window_size: [60]}
`
	code, m := post(t, adm+"/config", "application/x-yaml", []byte(bad))
	if code != 400 {
		t.Fatalf("%d %v", code, m)
	}
	fields, _ := m["fields"].(map[string]any)
	for _, f := range []string{"services[0].colour", "services[0].routes[0].paths[0]", "plugins[0].name", "plugins[1].config.window_size"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("error for %s missing; got %v", f, fields)
		}
	}
	if _, body := get(t, proxy+"/x"); body != "/v1/x" {
		t.Errorf("old config not serving: %q", body)
	}
}

func TestStatusConfigMetrics(t *testing.T) {
	_, proxy, adm, _ := setup(t, v1)
	get(t, proxy+"/a")
	code, body := get(t, adm+"/status")
	if code != 200 || !strings.Contains(body, `"ready":true`) || !strings.Contains(body, `"generation":1`) {
		t.Errorf("status: %d %s", code, body)
	}
	code, body = get(t, adm+"/config")
	if code != 200 || !strings.Contains(body, "_format_version") {
		t.Errorf("config: %d %s", code, body)
	}
	code, body = get(t, adm+"/metrics")
	for _, want := range []string{`sluice_http_requests_total{code="200",route="r",service="s"} 1`, `sluice_config_reloads_total{result="applied",source="test"} 1`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestReloadUnderLoad reloads through the admin API while clients send
// requests, and checks that no request fails and that the new config ends
// up serving.
func TestReloadUnderLoad(t *testing.T) {
	_, proxy, adm, up := setup(t, v1)
	const clients, perClient = 4, 150
	var failed, served atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{}
			for i := 0; i < perClient; i++ {
				res, err := c.Get(proxy + "/x")
				if err != nil {
					failed.Add(1)
					continue
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || !strings.HasSuffix(string(b), "/x") {
					failed.Add(1)
				}
				served.Add(1)
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	reloads := 0
	for i := 0; i < 20; i++ {
		cfg := strings.ReplaceAll(strings.ReplaceAll(v1, "UPSTREAM", up.URL), "/v1", fmt.Sprintf("/g%d", i))
		if i%5 == 4 {
			cfg = strings.ReplaceAll(cfg, "paths: [/]", "paths: [oops]") // rejected
		}
		code, m := post(t, adm+"/config", "application/x-yaml", []byte(cfg))
		switch {
		case i%5 == 4 && code != 400:
			t.Errorf("reload %d: %d %v, want 400", i, code, m)
		case i%5 != 4 && code != 201:
			t.Errorf("reload %d: %d %v", i, code, m)
		case code == 201:
			reloads++
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed during %d reloads", failed.Load(), served.Load(), reloads)
	}
	if _, body := get(t, proxy+"/x"); body != "/g18/x" {
		t.Errorf("serving %q, want the last applied config's /g18/x", body)
	}
}

// TestStatusReady: Kong's readiness probe, on the status listener and the
// admin API: 503 until a configuration serves, 200 then, 503 "draining"
// once shutdown has begun.
func TestStatusReady(t *testing.T) {
	g, err := gateway.New(gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := httptest.NewServer(StatusHandler(g))
	t.Cleanup(st.Close)
	adm := httptest.NewServer(Handler(g, Options{}))
	t.Cleanup(adm.Close)
	check := func(when string, want int, message string) {
		t.Helper()
		for _, base := range []string{st.URL, adm.URL} {
			code, body := get(t, base+"/status/ready")
			if code != want || !strings.Contains(body, `"message":"`+message+`"`) {
				t.Errorf("%s: %s/status/ready = %d %s, want %d %q", when, base, code, body, want, message)
			}
		}
	}
	check("before a configuration", 503, "no configuration available (configuration hash is not initialized)")
	if err := g.Load([]byte("_format_version: \"3.0\"\n"), "test"); err != nil {
		t.Fatal(err)
	}
	check("serving", 200, "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	check("shut down", 503, "draining")
}
