package adminhttp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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
