package decision

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestHTTPDecide(t *testing.T) {
	const cfg = `
response_headers: true
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	s := newService(t, cfg, newClock(t0).opts())
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	body := `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}], "hits_addend": 1}`
	code, got := post(t, srv.URL+"/v1/decide", body)
	var resp map[string]any
	if err := json.Unmarshal([]byte(got), &resp); err != nil || code != http.StatusOK {
		t.Fatalf("first: %d %s (%v)", code, got, err)
	}
	st := resp["statuses"].([]any)[0].(map[string]any)
	if resp["overall_code"] != "OK" || st["limit_remaining"] != 1.0 || st["duration_until_reset"] != "50s" ||
		st["current_limit"].(map[string]any)["unit"] != "MINUTE" {
		t.Errorf("first: %s", got)
	}
	if hs := resp["response_headers_to_add"].([]any); len(hs) != 3 {
		t.Errorf("headers: %v", hs)
	}
	// The same engine: the HTTP call counted, so this is the last one.
	c, _ := serveGRPC(t, s)
	runSteps(t, c, []step{{"grpc", request("d", desc("k", "v")), OK, codes_(OK), []uint32{0}, nil}})
	// Over limit: 429, and /json speaks envoyproxy/ratelimit's camelCase.
	code, got = post(t, srv.URL+"/json", `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`)
	if code != http.StatusTooManyRequests || !strings.Contains(got, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("over: %d %s", code, got)
	}

	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{"domain": "d", "descriptors": [{"entries": [{"key": "k", "valu": "v"}]}]}`, 400, `unknown field \"valu\"`},
		{`{"domain": "d"}`, 400, "rate limit descriptor list must not be empty"},
		{`not json`, 400, "decoding the request"},
		{`{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}], "hits_addend": -1}`, 400, "decoding the request"},
		{`{"domain": "d", "descriptors": [{"entries": [{"key": "k"}]}], "pad": "` + strings.Repeat("x", maxBody) + `"}`, 413, "request body too large"},
	} {
		code, got := post(t, srv.URL+"/v1/decide", tc.body)
		if code != tc.code || !strings.Contains(got, tc.want) {
			t.Errorf("%.60s: %d %s, want %d with %q", tc.body, code, got, tc.code, tc.want)
		}
	}
	resp2, err := http.Get(srv.URL + "/v1/decide")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/decide: %d", resp2.StatusCode)
	}
}

func TestHTTPStoreFailure(t *testing.T) {
	st := memorystore.New(memorystore.Options{SweepInterval: -1})
	s := mustNew(t, reloadV1, st, newClock(t0).opts())
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	_ = st.Close()
	code, got := post(t, srv.URL+"/v1/decide", `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(got, "store closed") {
		t.Errorf("closed store: %d %s", code, got)
	}
}

func TestHTTPStatus(t *testing.T) {
	s := newService(t, "domains: [{domain: b, descriptors: []}, {domain: a, descriptors: []}]", newClock(t0).opts())
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || st.Generation != 1 || st.Store != "memory" || strings.Join(st.Domains, ",") != "a,b" || !st.LoadedAt.Equal(t0) {
		t.Errorf("status %d %+v", resp.StatusCode, st)
	}
}
