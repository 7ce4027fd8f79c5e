package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
)

const countersConsumer = "0c3f3a6e-1111-4a5b-9c8d-000000000001"

// countersConfig is a consumer limited to 3 requests an hour, counted in
// the given strategy ("local", or "redis" with a port).
func countersConfig(t *testing.T, strategy string, redisPort int) string {
	t.Helper()
	redis := ""
	if strategy == "redis" {
		redis = fmt.Sprintf(", sync_rate: 0, redis: {host: 127.0.0.1, port: %d}", redisPort)
	}
	cfg := fmt.Sprintf(`
_format_version: "3.0"
consumers:
  - username: alice
    id: %s
    keyauth_credentials: [{key: alice-key}]
services:
  - name: s
    url: http://127.0.0.1:9
    routes:
      - name: r
        paths: [/]
        plugins:
          - name: key-auth
          - name: request-termination
            config: {status_code: 200, message: ok}
          - name: rate-limiting-advanced
            instance_name: per-consumer
            config: {limit: [3], window_size: [3600], window_type: fixed, identifier: consumer,
                     namespace: counters-%d, strategy: %s%s}
`, countersConsumer, time.Now().UnixNano(), strategy, redis)
	path := filepath.Join(t.TempDir(), "kong.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func callAs(t *testing.T, s *sluice) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.proxy+"/orders", nil)
	req.Header.Set("apikey", "alice-key")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func adminJSON(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd.Reset(b)
	}
	req, err := http.NewRequest(method, url, &rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil && res.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
	}
	return res.StatusCode
}

type counterAnswer struct {
	Windows []struct {
		Current   int64 `json:"current"`
		Limit     int64 `json:"limit"`
		Remaining int64 `json:"remaining"`
	} `json:"windows"`
}

func readCounter(t *testing.T, s *sluice) (int, counterAnswer) {
	t.Helper()
	var c counterAnswer
	code := adminJSON(t, "GET", s.admin+"/rate-limiting/plugins/per-consumer/counters/"+countersConsumer, nil, &c)
	return code, c
}

// exhaustAndReset is the operator's path: a consumer exhausts its limit,
// is found in top, its counter read, a request for it explained (and not
// counted), its counter reset on one node, and the next request allowed
// on the other.
func exhaustAndReset(t *testing.T, a, b *sluice) {
	for i, want := range []int{200, 200, 200, 429} {
		s := a
		if i%2 == 1 {
			s = b
		}
		if got := callAs(t, s); got != want {
			t.Fatalf("request %d: %d, want %d", i, got, want)
		}
	}
	var top struct {
		Data []struct {
			Top []struct {
				Identifier string `json:"identifier"`
				Denied     int64  `json:"denied"`
			} `json:"top"`
		} `json:"data"`
	}
	if code := adminJSON(t, "GET", b.admin+"/rate-limiting/top?plugin=per-consumer&by=denied&n=20", nil, &top); code != 200 ||
		len(top.Data) != 1 || len(top.Data[0].Top) != 1 || top.Data[0].Top[0].Identifier != countersConsumer || top.Data[0].Top[0].Denied != 1 {
		t.Fatalf("top: %d %+v; want the consumer with one denial", code, top)
	}
	code, c := readCounter(t, a)
	if code != 200 || len(c.Windows) != 1 || c.Windows[0].Current != 4 || c.Windows[0].Remaining != 0 {
		t.Fatalf("counter: %d %+v; want 4 counted (a fixed window keeps the denied one), none remaining", code, c)
	}
	var ex struct {
		Allowed  bool `json:"allowed"`
		Status   int  `json:"status"`
		Consumer struct {
			Name string `json:"name"`
		} `json:"consumer"`
		Plugins []struct {
			Name      string `json:"name"`
			Ran       bool   `json:"ran"`
			RateLimit *struct {
				CounterKey string `json:"counter_key"`
				Allowed    bool   `json:"allowed"`
			} `json:"rate_limit"`
		} `json:"plugins"`
	}
	body := map[string]any{"method": "GET", "path": "/orders", "headers": map[string][]string{"apikey": {"alice-key"}}, "client_ip": "198.51.100.4"}
	if code := adminJSON(t, "POST", a.admin+"/rate-limiting/explain", body, &ex); code != 200 || ex.Allowed || ex.Status != 429 ||
		ex.Consumer.Name != "alice" || len(ex.Plugins) != 3 || ex.Plugins[1].RateLimit == nil ||
		ex.Plugins[1].RateLimit.CounterKey != countersConsumer || ex.Plugins[2].Name != "request-termination" || ex.Plugins[2].Ran {
		t.Fatalf("explain: %d %+v; want key-auth, rate-limiting-advanced answering 429, request-termination not run", code, ex)
	}
	if _, c := readCounter(t, b); c.Windows[0].Current != 4 {
		t.Fatalf("explain counted the request: %+v", c)
	}
	if code := adminJSON(t, "DELETE", a.admin+"/rate-limiting/plugins/per-consumer/counters/"+countersConsumer, nil, nil); code != 204 {
		t.Fatalf("DELETE: %d", code)
	}
	if code, _ := readCounter(t, b); code != 404 {
		t.Fatalf("counter after the reset: %d, want 404", code)
	}
	if got := callAs(t, b); got != 200 {
		t.Fatalf("after the reset: %d, want 200", got)
	}
	if _, c := readCounter(t, a); c.Windows[0].Current != 1 {
		t.Fatalf("counter after one more request: %+v, want 1", c)
	}
}

func TestCountersAPILocal(t *testing.T) {
	s := start(t, "-c", countersConfig(t, "local", 0), "--watch=false")
	exhaustAndReset(t, s, s)
	s.stop(t)
}

// Two gateways on one real redis-server: a reset on one is seen by the
// other.
func TestCountersAPIRedisTwoNodes(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	path := countersConfig(t, "redis", rs.Port())
	a := start(t, "-c", path, "--watch=false")
	b := start(t, "-c", path, "--watch=false")
	exhaustAndReset(t, a, b)
	a.stop(t)
	b.stop(t)
}
