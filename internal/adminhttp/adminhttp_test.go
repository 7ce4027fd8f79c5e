package adminhttp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestJSONErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /thing", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "plain ok") })
	mux.HandleFunc("DELETE /thing", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /own", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":"no such counter"}`)
	})
	srv := httptest.NewServer(JSONErrors(mux, func(code int, msg string) any { return map[string]any{"error": msg, "code": code} }))
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		code         int
		ctype, body  string
		allow        string
	}{
		{"GET", "/thing", 200, "text/plain", "plain ok", ""},
		{"PUT", "/thing", 405, "application/json", `{"code":405,"error":"Method Not Allowed"}`, "DELETE, GET, HEAD"},
		{"GET", "/nope", 404, "application/json", `{"code":404,"error":"Not Found"}`, ""},
		{"GET", "/own", 404, "application/json", `{"error":"no such counter"}`, ""},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		body := strings.TrimSpace(string(b))
		if res.StatusCode != c.code || !strings.HasPrefix(res.Header.Get("Content-Type"), c.ctype) || body != c.body {
			t.Errorf("%s %s: %d %q %s", c.method, c.path, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		if c.allow != "" && res.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, res.Header.Get("Allow"), c.allow)
		}
		if c.code >= 400 && !json.Valid(b) {
			t.Errorf("%s %s: not JSON: %s", c.method, c.path, b)
		}
	}
}

// TestCounterRoutes: the identifier is the path as sent after
// "counters/", unescaped, never cleaned by the mux (a leading "/" of a
// path identifier survives); other paths reach the mux.
func TestCounterRoutes(t *testing.T) {
	var got []string
	record := func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.PathValue("plugin")+" "+r.PathValue("identifier"))
		w.WriteHeader(http.StatusNoContent)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rate-limiting/plugins", func(w http.ResponseWriter, r *http.Request) { got = append(got, "list") })
	srv := httptest.NewServer(CounterRoutes(mux, record, record, func(msg string) any { return map[string]string{"message": msg} }))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/rate-limiting/plugins/p1/counters//a/b", 204, "GET p1 /a/b"},
		{"DELETE", "/rate-limiting/plugins/p1/counters/%2Fa%2Fb", 204, "DELETE p1 /a/b"},
		{"GET", "/rate-limiting/plugins/my%20plugin/counters/10.0.0.1", 204, "GET my plugin 10.0.0.1"},
		{"GET", "/rate-limiting/plugins/p1/counters/a/../b", 204, "GET p1 a/../b"},
		{"PUT", "/rate-limiting/plugins/p1/counters/x", 405, ""},
		{"GET", "/rate-limiting/plugins", 200, "list"},
	} {
		got = nil
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		req.URL.RawPath = c.path // as sent, not re-escaped
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.code || strings.Join(got, ",") != c.want {
			t.Errorf("%s %s: %d %q, want %d %q", c.method, c.path, res.StatusCode, got, c.code, c.want)
		}
	}
}

func TestTopQuery(t *testing.T) {
	for _, c := range []struct {
		query, err string
		n          int
		by         string
	}{
		{"", "", 20, "denied"},
		{"by=requests&n=5&plugin=x", "", 5, "requests"},
		{"plugins=x", "plugins: unknown query parameter (this call takes plugin, by, n)", 0, ""},
		{"by=top", "by: want denied or requests", 0, ""},
		{"n=0", "n: want a whole number from 1 to 1000", 0, ""},
		{"n=1001", "n: want a whole number from 1 to 1000", 0, ""},
	} {
		q, _ := url.ParseQuery(c.query)
		_, by, n, err := TopQuery(q, "plugin")
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.err {
			t.Errorf("%q: error %v, want %q", c.query, err, c.err)
		}
		if c.err == "" && (n != c.n || by != c.by) {
			t.Errorf("%q: by %s n %d, want %s %d", c.query, by, n, c.by, c.n)
		}
	}
}
