// Package adminhttp holds what the admin HTTP APIs of the gateway, the
// decision service and the Kong plugins share beyond their guards
// (internal/adminauth).
package adminhttp

import (
	"encoding/json"
	"net/http"
	"strings"
)

// JSONErrors serves h, answering in JSON where an http.ServeMux answers a
// request that matches no route (404) or none for its method (405, with
// its Allow header) in plain text. body builds the answer from the status
// and its text, in the API's own shape ({"message": ...} or
// {"error": ...}).
func JSONErrors(h http.Handler, body func(code int, msg string) any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&muxErrors{ResponseWriter: w, body: body}, r)
	})
}

// muxErrors turns a plain-text 404 or 405, as http.Error writes it, into
// JSON; every other answer passes through.
type muxErrors struct {
	http.ResponseWriter
	body     func(int, string) any
	replaced bool
}

func (m *muxErrors) WriteHeader(code int) {
	h := m.Header()
	if (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) && strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		m.replaced = true
		h.Set("Content-Type", "application/json")
		h.Del("X-Content-Type-Options")
		m.ResponseWriter.WriteHeader(code)
		_ = json.NewEncoder(m.ResponseWriter).Encode(m.body(code, http.StatusText(code)))
		return
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *muxErrors) Write(b []byte) (int, error) {
	if m.replaced {
		return len(b), nil // the plain-text body, already answered in JSON
	}
	return m.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (m *muxErrors) Unwrap() http.ResponseWriter { return m.ResponseWriter }
