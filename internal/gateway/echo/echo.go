// Package echo is a tiny upstream for quickstarts and tests: it answers
// every request with 200 and a JSON description of what it received.
package echo

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
)

// Handler answers with {"method", "path", "query", "host", "headers"}.
// GET /status/<code> answers with that status instead of 200.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := make(map[string]string, len(r.Header))
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			hdr[strings.ToLower(k)] = strings.Join(r.Header[k], ", ")
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method":  r.Method,
			"path":    r.URL.Path,
			"query":   r.URL.RawQuery,
			"host":    r.Host,
			"headers": hdr,
		}) // a client that went away needs no answer
	})
}
